"""Trajectories of an evaluation rollout -> evaluation records (docs/contracts.md).

One record per (question, run): the strict and flexible answers extracted from the last
Answerer output, their exact match against every gold alias, and the workload and
behaviour figures of the trajectory.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

from pipeline.agents.records import trajectory_table
from pipeline.agents.trajectory import Rollout
from pipeline.errors import InputError
from pipeline.eval.em import exact_match
from pipeline.eval.extraction import flexible_answer, strict_answer
from pipeline.eval.funnel import FUNNEL_COLUMNS, trajectory_funnel

RECORD_COLUMNS = [
    "system", "question_id", "dataset", "run", "strict_answer", "flexible_answer",
    "strict_correct", "flexible_correct", "format_failure", "search_actions", "input_tokens",
    "output_tokens", "has_subtask_and_report", "has_final_answer", "forced_answer",
    "golden_answers", "last_answerer_output", "trajectory_id", "workflow",
]
_BOOL_COLUMNS = ("strict_correct", "flexible_correct", "format_failure",
                 "has_subtask_and_report", "has_final_answer", "forced_answer")
_INT_COLUMNS = ("run", "search_actions", "input_tokens", "output_tokens")


def run_of(trajectory_id: str) -> int:
    """Run index k of a trajectory id "{question_id}/t{k}"."""
    _, sep, k = trajectory_id.rpartition("/t")
    if not sep or not k.isdigit():
        raise InputError(f"trajectory_id {trajectory_id!r}: expected '<question_id>/t<k>'")
    return int(k)


def score_trajectories(
    trajectories: pd.DataFrame, golden: Mapping[str, Sequence[str]], system: str
) -> pd.DataFrame:
    """Evaluation records from a `trajectory_table` (one row per trajectory = run).

    `golden` maps question_id to its gold aliases. Rows come out sorted by
    (question_id order of `trajectories`, run).
    """
    rows = []
    for t in trajectories.itertuples(index=False):
        if t.question_id not in golden:
            raise InputError(f"trajectory {t.trajectory_id!r}: question_id {t.question_id!r} has no golden_answers")
        aliases = [str(a) for a in golden[t.question_id]]
        output = str(t.last_answerer_output or "")
        strict = strict_answer(output)
        flexible = flexible_answer(output)
        rows.append({
            "system": system, "question_id": t.question_id, "dataset": t.dataset,
            "run": run_of(t.trajectory_id), "strict_answer": strict, "flexible_answer": flexible,
            "strict_correct": exact_match(strict, aliases),
            "flexible_correct": exact_match(flexible, aliases),
            "format_failure": strict is None, "search_actions": t.search_actions,
            "input_tokens": t.input_tokens, "output_tokens": t.output_tokens,
            "has_subtask_and_report": t.has_subtask_and_report,
            "has_final_answer": t.has_final_answer, "forced_answer": t.forced_answer,
            "golden_answers": aliases, "last_answerer_output": output,
            "trajectory_id": t.trajectory_id, "workflow": t.workflow,
        })
    records = pd.DataFrame(rows, columns=RECORD_COLUMNS)
    for column in _BOOL_COLUMNS:
        records[column] = records[column].astype(bool)
    for column in _INT_COLUMNS:
        records[column] = records[column].astype(np.int64)
    return records


_FUNNEL_BOOL = ("answer_retrieved", "answer_reported", "handed")
_FUNNEL_INT = ("searcher_calls", "searcher_calls_read", "searcher_calls_kept", "leader_waves")


def funnel_table(rollout: Rollout) -> pd.DataFrame:
    """The funnel columns of every trajectory (pipeline.eval.funnel), in the rollout's order."""
    table = pd.DataFrame([trajectory_funnel(t) for t in rollout.trajectories], columns=FUNNEL_COLUMNS)
    for column in _FUNNEL_BOOL:
        table[column] = table[column].astype(bool)
    for column in _FUNNEL_INT:
        table[column] = table[column].astype(np.int64)
    table["n_hops"] = table["n_hops"].astype("Int64")
    table["bridge_used"] = table["bridge_used"].astype("boolean")
    table["family"] = table["family"].astype(object)
    return table


def score_rollout(rollout: Rollout, system: str = "") -> pd.DataFrame:
    """Evaluation records of every trajectory of a rollout, scored against its questions' gold,
    with each workflow's funnel (pipeline.eval.funnel)."""
    golden = {t.question_id: t.golden_answers for t in rollout.trajectories}
    records = score_trajectories(trajectory_table(rollout), golden, system)
    return pd.concat([records, funnel_table(rollout)], axis=1)
