"""Rollout -> tables -> Teacher scores -> judge scores -> rewards: the one sequence that both the
in-process trainer (pipeline.rl.trainer) and verl's agent loop (pipeline.verl_agent.agent_run)
run on a rollout, and the one check that a training system has the scorers it needs."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from pipeline.agents import to_tables
from pipeline.agents.trajectory import Rollout
from pipeline.config import RewardParams
from pipeline.errors import InputError
from pipeline.policy.base import PolicyBackend
from pipeline.rl.judge import judge_searchers
from pipeline.rl.rewards import answerer_correctness, compute_rewards, team_outcome
from pipeline.rl.teacher_scoring import score_with_teacher
from pipeline.systems import System


def require_scorers(system: System, teacher: Any, judge: Any, what: str = "backend",
                    allow_unused: bool = False) -> None:
    """Fail, naming the field, unless `teacher` and `judge` are given (not None) exactly when
    `system` trains with a Teacher and a judge (`allow_unused`: given ones it does not use are
    fine); `what` says what they are (a backend, a URL)."""
    training = system.training
    if training is None:
        raise InputError(f"system: {system.name} is not trained")
    if training.teacher is not None and teacher is None:
        raise InputError(f"teacher: {system.name} needs a Teacher {what} (data/models/{training.teacher})")
    if training.judge is not None and judge is None:
        raise InputError(f"judge: {system.name} needs a judge {what} (data/models/{training.judge})")
    if allow_unused:
        return
    if training.teacher is None and teacher is not None:
        raise InputError(f"teacher: {system.name} trains without a Teacher; expected none")
    if training.judge is None and judge is not None:
        raise InputError(f"judge: {system.name} trains without a judge; expected none")


@dataclass
class RewardedTables:
    samples: pd.DataFrame  # one row per model call, with every reward column
    tokens: pd.DataFrame  # one row per response token, teacher_logp filled where scored
    judge_unparsable: int = 0  # judge outputs without a score (scored 0)


def rewarded_tables(
    rollout: Rollout,
    system: System,
    rewards: RewardParams,
    teacher: PolicyBackend | None = None,
    judge: PolicyBackend | None = None,
    judge_max_new_tokens: int = 0,
    searcher_outcome: str = "team",
) -> RewardedTables:
    """The samples and tokens tables of `rollout` for training `system`: its trained roles'
    loss masks, the frozen Teacher's log-probs, the judge's scores and every reward."""
    require_scorers(system, teacher, judge)
    samples, tokens = to_tables(rollout, system.trained_roles)
    if teacher is not None:
        tokens = score_with_teacher(samples, tokens, teacher)
    unparsable = 0
    if judge is not None:
        samples, unparsable = judge_searchers(samples, judge, judge_max_new_tokens)
    return RewardedTables(compute_rewards(samples, tokens, system, rewards, searcher_outcome), tokens, unparsable)


def outcome_tables(rollout: Rollout, system: System) -> RewardedTables:
    """The tables of a dev rollout: no Teacher, no judge; every sample's reward is its
    trajectory's outcome R_EM."""
    samples, tokens = to_tables(rollout, system.trained_roles)
    samples = team_outcome(answerer_correctness(samples))
    samples["reward"] = samples["r_em"].to_numpy(dtype=np.float64)
    return RewardedTables(samples, tokens)
