"""One agent-loop run: one trajectory of one question, from rollout to per-sample rewards.

The in-process trainer's sequence, restricted to one trajectory: `run_workflow` (one question,
n_traj=1), then pipeline.rl.batch_rewards.rewarded_tables (tables -> Teacher scores -> judge
scores -> rewards), the function the trainer's `collect_batch` calls too.
Every reward is a function of its own trajectory (R_EM, C_tool, the Leader's summed KL), so
computing them per trajectory gives the batch's values. GRPO statistics span trajectories and
are left to the estimator over the whole verl batch (pipeline.verl_agent.advantage).

Ids: `run_workflow` names its one trajectory "{question_id}/t0"; `renumber` makes it t{k}
(verl's session index), so the five trajectories of a question keep the contract's ids.
Dev rows (validation) use the dev rollout (one Answerer candidate), no Teacher and no judge,
and carry reward = R_EM.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pandas as pd

from pipeline.agents import run_workflow
from pipeline.agents.prompts import Prompts
from pipeline.agents.trajectory import Rollout
from pipeline.errors import InputError
from pipeline.policy.base import PolicyBackend
from pipeline.retrieval.base import Retriever
from pipeline.rl.batch_rewards import outcome_tables, require_scorers, rewarded_tables
from pipeline.rl.train_params import TrainConfig
from pipeline.systems import trained_system
from pipeline.verl_agent.seeds import trajectory_seed


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
    cfg: TrainConfig,
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
    system = trained_system(cfg.system)
    if not dev:
        require_scorers(system, teacher, judge, "backend (teacher_url / judge_url)")
    rollout = run_workflow(
        system.workflow, [question], policy, retriever, cfg.dev_rollout if dev else cfg.rollout,
        n_traj=1, seed=trajectory_seed(cfg.seed, step, question["question_id"], k), prompts=prompts,
    )
    renumber(rollout, k)
    if dev:
        tables = outcome_tables(rollout, system)
        return tables.samples, tables.tokens
    tables = rewarded_tables(rollout, system, cfg.rewards, teacher, judge, cfg.judge_max_new_tokens)
    return tables.samples, tables.tokens
