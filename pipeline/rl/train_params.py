"""Every number one training run needs, resolved from params.yaml into one frozen record.

`train_config(params, key)` reads `common` (protocol, rewards, optim), `<profile>.train.shared`
and `<profile>.train.systems.<key>`; `key` is one of TRAIN_KEYS. Tests build TrainConfig
directly with tiny numbers.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import asdict, dataclass

from pipeline.agents.config import WorkflowConfig
from pipeline.config import Params, workflow_config
from pipeline.io import InputError

# params key -> (training mode of pipeline.rl.modes, pipeline.systems name)
TRAIN_KEYS: dict[str, tuple[str, str]] = {
    "teacher": ("stage1", "c_mas_rl"),
    "team": ("opd", "multiagent_opd"),
    "prompted_critic": ("prompted_critic", "prompted_critic"),
    "outcome_rl_searcher": ("outcome_rl_searcher", "ablation_outcome_rl_searcher"),
    "base_teacher": ("base_teacher", "ablation_base_teacher"),
    "no_searcher_supervision": ("no_searcher_supervision", "ablation_no_searcher_supervision"),
}


@dataclass(frozen=True)
class TrainConfig:
    mode: str
    steps: int
    seed: int
    questions_per_batch: int
    trajectories_per_question: int
    lr: float
    entropy_coef: float
    eval_every: int
    dev_questions: int
    checkpoint_every: int
    audit_every: int
    judge_max_new_tokens: int
    rollout: WorkflowConfig  # training rollouts: n_candidates = common.protocol.train_candidates
    dev_rollout: WorkflowConfig  # dev evaluation: the same sampling with 1 Answerer candidate
    n_minibatches: int = 5
    clip_ratio: float = 0.2
    clip_ratio_c: float = 3.0
    grad_clip: float = 1.0
    adam_betas: tuple[float, float] = (0.9, 0.999)
    weight_decay: float = 0.01
    kl_coef: float = 1e-3
    opd_beta: float = 0.01
    keep_checkpoints: int = 2

    def fingerprint(self) -> str:
        """Hash of every number that shapes the run except `steps` (a longer run may resume)."""
        data = asdict(self)
        data.pop("steps")
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def train_config(params: Params, key: str) -> TrainConfig:
    """The TrainConfig of one training stage; `key` names its `train.systems` entry."""
    if key not in TRAIN_KEYS:
        raise InputError(f"train.systems: unknown key {key!r}; expected one of {', '.join(TRAIN_KEYS)}")
    shared = params.train.shared
    own = getattr(params.train.systems, key)
    common = params.common
    return TrainConfig(
        mode=TRAIN_KEYS[key][0],
        steps=own.steps,
        seed=own.seed,
        questions_per_batch=shared.questions_per_batch,
        trajectories_per_question=shared.trajectories_per_question,
        lr=shared.lr,
        entropy_coef=shared.entropy_coef,
        eval_every=shared.eval_every,
        dev_questions=shared.dev_questions,
        checkpoint_every=shared.checkpoint_every,
        audit_every=shared.audit_every,
        judge_max_new_tokens=shared.judge_max_new_tokens,
        rollout=workflow_config(params, shared.rollout, common.protocol.train_candidates),
        dev_rollout=workflow_config(params, shared.rollout, common.protocol.eval_candidates),
        n_minibatches=common.optim.n_minibatches,
        clip_ratio=common.optim.clip_ratio,
        clip_ratio_c=common.optim.clip_ratio_c,
        grad_clip=common.optim.grad_clip,
        adam_betas=(float(common.optim.adam_betas[0]), float(common.optim.adam_betas[1])),
        weight_decay=common.optim.weight_decay,
        kl_coef=common.rewards.kl_coef,
        opd_beta=common.rewards.opd_beta,
    )
