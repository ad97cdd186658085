"""One agent-loop run: one trajectory of one question, from rollout to per-sample rewards.

The same code as the in-process trainer's `collect_batch`, restricted to one trajectory:
`run_workflow` (one question, n_traj=1) -> tables -> Teacher scores -> judge scores -> rewards.
Every reward is a function of its own trajectory (R_EM, C_tool, the Leader's summed KL), so
computing them per trajectory gives the batch's values. GRPO statistics span trajectories and
are left to the estimator over the whole verl batch (pipeline.verl_agent.advantage).

Ids: `run_workflow` names its one trajectory "{question_id}/t0"; `renumber` makes it t{k}
(verl's session index), so the five trajectories of a question keep the contract's ids.
Dev rows (validation) use the dev rollout (one Answerer candidate), no Teacher and no judge,
and carry reward = R_EM.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np
import pandas as pd

from pipeline.agents import run_workflow, to_tables
from pipeline.agents.prompts import Prompts
from pipeline.agents.trajectory import Rollout
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.config import Params, RewardParams
from pipeline.errors import InputError
from pipeline.policy.base import PolicyBackend
from pipeline.retrieval.base import Retriever
from pipeline.rl.judge import judge_searchers
from pipeline.rl.modes import TrainingMode, get_mode
from pipeline.rl.rewards import answerer_correctness, compute_rewards, team_outcome
from pipeline.rl.teacher_scoring import score_with_teacher
from pipeline.rl.train_params import train_config
from pipeline.verl_agent.seeds import trajectory_seed


@dataclass(frozen=True)
class TeamSettings:
    """What an agent-loop run needs from params.yaml (one training stage)."""

    train_key: str
    mode: str
    seed: int
    rollout: WorkflowConfig
    dev_rollout: WorkflowConfig
    rewards: RewardParams
    judge_max_new_tokens: int

    @property
    def training_mode(self) -> TrainingMode:
        return get_mode(self.mode)

    @property
    def workflow(self) -> str:
        return self.training_mode.workflow

    @property
    def opd_beta(self) -> float:
        return self.rewards.opd_beta

    @property
    def needs_teacher(self) -> bool:
        return self.training_mode.teacher is not None

    @property
    def needs_judge(self) -> bool:
        return self.training_mode.judge is not None


def team_settings(params: Params, key: str) -> TeamSettings:
    """Settings of the training stage `train.systems.<key>` of the active profile."""
    cfg = train_config(params, key)
    return TeamSettings(
        train_key=key, mode=cfg.mode, seed=cfg.seed, rollout=cfg.rollout, dev_rollout=cfg.dev_rollout,
        rewards=cfg.rewards, judge_max_new_tokens=cfg.judge_max_new_tokens,
    )


def renumber(rollout: Rollout, k: int) -> None:
    """Rename the rollout's trajectories "{question_id}/t{k}" (sample and request ids follow)."""
    for traj in rollout.trajectories:
        old, new = traj.trajectory_id, f"{traj.question_id}/t{k}"
        traj.trajectory_id = new
        for call in traj.calls:
            call.sample_id = new + call.sample_id[len(old):]
            if call.request_id:
                call.request_id = new + call.request_id[len(old):]


def question_row(extra_info: Mapping[str, Any]) -> dict[str, Any]:
    """The question of a verl dataset row (pipeline.verl_agent.datasets writes extra_info)."""
    missing = [k for k in ("question_id", "question", "golden_answers") if k not in extra_info]
    if missing:
        raise InputError(f"extra_info: missing field(s) {', '.join(missing)} (rows from pipeline.verl_agent.datasets)")
    return {
        "question_id": str(extra_info["question_id"]),
        "question": str(extra_info["question"]),
        "golden_answers": [str(g) for g in extra_info["golden_answers"]],
        "dataset": str(extra_info.get("dataset", "") or ""),
    }


def run_trajectory(
    question: Mapping[str, Any],
    k: int,
    settings: TeamSettings,
    policy: PolicyBackend,
    retriever: Retriever,
    *,
    step: int = 0,
    teacher: PolicyBackend | None = None,
    judge: PolicyBackend | None = None,
    dev: bool = False,
    prompts: Prompts | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(samples, tokens) of trajectory k of `question`, with rewards (see the module doc)."""
    if not dev and settings.needs_teacher and teacher is None:
        raise InputError(f"teacher: mode {settings.mode} needs a Teacher backend (teacher_url)")
    if not dev and settings.needs_judge and judge is None:
        raise InputError("judge: mode prompted_critic needs a judge backend (judge_url)")
    rollout = run_workflow(
        settings.workflow, [question], policy, retriever, settings.dev_rollout if dev else settings.rollout,
        n_traj=1, seed=trajectory_seed(settings.seed, step, question["question_id"], k), prompts=prompts,
    )
    renumber(rollout, k)
    samples, tokens = to_tables(rollout, settings.training_mode.trained_roles)
    if dev:
        samples = team_outcome(answerer_correctness(samples))
        samples["reward"] = samples["r_em"].to_numpy(dtype=np.float64)
        return samples, tokens
    if settings.needs_teacher:
        tokens = score_with_teacher(samples, tokens, teacher)
    if settings.needs_judge:
        samples, _ = judge_searchers(samples, judge, settings.judge_max_new_tokens)
    return compute_rewards(samples, tokens, settings.training_mode, settings.rewards), tokens
