"""Rollout -> the samples, tokens and trajectory tables of docs/contracts.md."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from pipeline.agents.trajectory import Rollout
from pipeline.domain import ROLES

SAMPLE_COLUMNS = [
    "sample_id", "question_id", "trajectory_id", "workflow", "dataset", "role", "call_id",
    "agent_id", "request_id", "candidate_id", "step", "wave", "prompt_ids", "prompt_text",
    "response_text", "action", "malformed", "malformation", "malformation_detail", "n_search",
    "reported", "cut", "answer", "golden_answers", "c_tool", "forced_answer", "is_final_request",
    "task", "report", "queries", "passages_text", "n_turns", "input_tokens", "output_tokens",
    "finish_reason",
]
TOKEN_COLUMNS = [
    "sample_id", "pos", "token_id", "role", "source", "loss_mask", "old_logp", "teacher_logp", "advantage",
]
TRAJECTORY_COLUMNS = [
    "question_id", "trajectory_id", "workflow", "dataset", "final_answer", "last_answerer_output",
    "search_actions", "c_tool", "forced_answer", "has_subtask_and_report", "has_final_answer",
    "input_tokens", "output_tokens", "n_calls", "n_turns", "steps", "waves",
]


def _check_roles(trained_roles: Iterable[str]) -> frozenset[str]:
    roles = frozenset(trained_roles)
    unknown = roles - set(ROLES)
    if unknown:
        raise ValueError(f"trained_roles: unknown roles {sorted(unknown)}; expected a subset of {ROLES}")
    return roles


def samples_table(rollout: Rollout) -> pd.DataFrame:
    """One row per model call (each Answerer candidate is its own row)."""
    rows = []
    for traj in rollout.trajectories:
        for c in traj.calls:
            rows.append(
                {
                    "sample_id": c.sample_id, "question_id": traj.question_id,
                    "trajectory_id": traj.trajectory_id, "workflow": traj.workflow,
                    "dataset": traj.dataset, "role": c.role, "call_id": c.call_id,
                    "agent_id": c.agent_id, "request_id": c.request_id,
                    "candidate_id": c.candidate_id, "step": c.step, "wave": c.wave,
                    "prompt_ids": list(c.prompt_ids), "prompt_text": c.prompt_text,
                    "response_text": c.response_text, "action": c.action,
                    "malformed": c.malformed, "malformation": c.malformation,
                    "malformation_detail": c.malformation_detail, "n_search": c.n_search,
                    "reported": c.reported, "cut": c.cut, "answer": c.answer,
                    "golden_answers": list(traj.golden_answers), "c_tool": traj.c_tool,
                    "forced_answer": traj.forced_answer, "is_final_request": c.is_final_request,
                    "task": c.task, "report": c.report, "queries": list(c.queries),
                    "passages_text": c.passages_text, "n_turns": c.n_turns,
                    "input_tokens": c.input_tokens, "output_tokens": c.output_tokens,
                    "finish_reason": c.finish_reason,
                }
            )
    return pd.DataFrame(rows, columns=SAMPLE_COLUMNS)


def tokens_table(rollout: Rollout, trained_roles: Iterable[str] = ROLES) -> pd.DataFrame:
    """One row per response token; loss_mask 1 only on generated tokens of a trained role."""
    trained = _check_roles(trained_roles)
    sample_ids, roles, sources, token_ids, logps, masks, pos = [], [], [], [], [], [], []
    for c in rollout.calls:
        n = 0
        for seg in c.segments:
            k = len(seg.token_ids)
            generated = seg.source == "generated"
            sample_ids += [c.sample_id] * k
            roles += [c.role] * k
            sources += [seg.source] * k
            token_ids += seg.token_ids
            logps += seg.logprobs if generated else [0.0] * k
            masks += [int(generated and c.role in trained)] * k
            pos += range(n, n + k)
            n += k
    size = len(token_ids)
    return pd.DataFrame(
        {
            "sample_id": pd.Series(sample_ids, dtype="str"),
            "pos": np.asarray(pos, dtype=np.int64),
            "token_id": np.asarray(token_ids, dtype=np.int64),
            "role": pd.Series(roles, dtype="str"),
            "source": pd.Series(sources, dtype="str"),
            "loss_mask": np.asarray(masks, dtype=np.int64),
            "old_logp": np.asarray(logps, dtype=np.float64),
            "teacher_logp": np.full(size, np.nan),
            "advantage": np.zeros(size),
        },
        columns=TOKEN_COLUMNS,
    )


def to_tables(
    rollout: Rollout, trained_roles: Iterable[str] = ROLES
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(samples, tokens) of a rollout."""
    return samples_table(rollout), tokens_table(rollout, trained_roles)


def trajectory_table(rollout: Rollout) -> pd.DataFrame:
    """One row per trajectory: outcome, behaviour and workload figures."""
    rows = [
        {
            "question_id": t.question_id, "trajectory_id": t.trajectory_id, "workflow": t.workflow,
            "dataset": t.dataset, "final_answer": t.final_answer,
            "last_answerer_output": t.last_answerer_output, "search_actions": t.search_actions,
            "c_tool": t.c_tool, "forced_answer": t.forced_answer,
            "has_subtask_and_report": t.has_subtask_and_report,
            "has_final_answer": t.has_final_answer, "input_tokens": t.input_tokens,
            "output_tokens": t.output_tokens, "n_calls": len(t.calls),
            "n_turns": sum(c.n_turns for c in t.calls), "steps": t.steps, "waves": t.waves,
        }
        for t in rollout.trajectories
    ]
    return pd.DataFrame(rows, columns=TRAJECTORY_COLUMNS)
