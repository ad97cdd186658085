"""Every number one training run needs, resolved from params.yaml into one frozen record.

`train_config(params, name)` reads `common` (protocol, rewards, optim), `<profile>.train.shared`
(with the OPD beta and the tie rule, which a profile may set apart from the paper's),
`<profile>.train.systems.<name>` and the evaluation's sampling (`<profile>.eval.rollout`,
`<profile>.eval.seed`); `name` is a trained system of pipeline.systems. Nothing here has a
default: every value comes from params.yaml.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.config import OptimParams, Params, RewardParams, workflow_config
from pipeline.errors import InputError
from pipeline.systems import trained_system

KEEP_CHECKPOINTS = 2  # newest checkpoints kept on disk (resume state, not a result)


@dataclass(frozen=True)
class DevSettings:
    """How a training run measures itself on dev: the same for every training stage."""

    dev_questions: int  # a fixed seeded draw over both training datasets
    dev_rollout: WorkflowConfig  # the test evaluation's sampling (<profile>.eval.rollout), 1 candidate
    reference_seed: int  # the sampling seed of every dev evaluation and of the KL contexts (<profile>.eval.seed)


def dev_settings(params: Params) -> DevSettings:
    return DevSettings(
        dev_questions=params.train.shared.dev_questions,
        dev_rollout=workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates),
        reference_seed=params.eval.seed,
    )


@dataclass(frozen=True)
class TrainConfig:
    system: str  # the trained system's name (pipeline.systems)
    steps: int
    seed: int
    questions_per_batch: int
    oversample: int  # dynamic sampling: questions drawn per trained question (1: off; pipeline.rl.group_filter)
    searcher_outcome: str  # Stage I: "team" (the paper's R_EM) | "report" (the Searcher's own report holds gold)
    trajectories_per_question: int
    lr: float
    entropy_coef: float
    eval_every: int
    dev_questions: int
    checkpoint_every: int
    audit_every: int
    judge_max_new_tokens: int
    opd_beta: float  # the Searcher's OPD advantage scale
    tie_on: str  # "reward" | "outcome": which GRPO groups count as tied (pipeline.rl.advantages)
    rollout: WorkflowConfig  # training rollouts: n_candidates = common.protocol.train_candidates
    dev_rollout: WorkflowConfig  # dev evaluation: the test evaluation's sampling (<profile>.eval.rollout), 1 candidate
    optim: OptimParams  # common.optim
    rewards: RewardParams  # common.rewards
    reference_seed: int  # the fixed dev Searcher contexts of the KL diagnostic (<profile>.eval.seed)

    @property
    def dev(self) -> DevSettings:
        return DevSettings(self.dev_questions, self.dev_rollout, self.reference_seed)

    def fingerprint(self) -> str:
        """Hash of every number that shapes the run except `steps` (a longer run may resume)."""
        data = asdict(self)
        data.pop("steps")
        data["optim"], data["rewards"] = self.optim.model_dump(), self.rewards.model_dump()
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def train_config(params: Params, name: str) -> TrainConfig:
    """The TrainConfig of the training stage of system `name` (its `train.systems` entry)."""
    system = trained_system(name)
    shared = params.train.shared
    own = getattr(params.train.systems, system.name)
    if own.searcher_outcome != "team" and system.training.searcher_reward != "em_and_behaviour":
        raise InputError(f"{params.profile}.train.systems.{system.name}.searcher_outcome: "
                         f"{own.searcher_outcome!r} applies to the Stage-I Searcher reward only; expected 'team'")
    common = params.common
    dev = dev_settings(params)
    return TrainConfig(
        system=system.name,
        steps=own.steps,
        seed=own.seed,
        questions_per_batch=own.questions_per_batch or shared.questions_per_batch,
        oversample=own.oversample,
        searcher_outcome=own.searcher_outcome,
        trajectories_per_question=shared.trajectories_per_question,
        lr=shared.lr,
        entropy_coef=shared.entropy_coef,
        eval_every=shared.eval_every,
        dev_questions=dev.dev_questions,
        checkpoint_every=shared.checkpoint_every,
        audit_every=shared.audit_every,
        judge_max_new_tokens=shared.judge_max_new_tokens,
        opd_beta=shared.opd_beta,
        tie_on=shared.tie_on,
        rollout=workflow_config(params, shared.rollout, common.protocol.train_candidates),
        dev_rollout=dev.dev_rollout,
        optim=common.optim,
        rewards=common.rewards,
        reference_seed=dev.reference_seed,
    )
