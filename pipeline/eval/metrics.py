"""Accuracy, workload and behaviour metrics from evaluation records (docs/method.md §7).

All shares and accuracies are in percent. Column names carry the number of runs
(`avg@4`, `pass@4`, `all@4` for common.eval.runs = 4).
"""

from __future__ import annotations

from collections.abc import Sequence

import pandas as pd

from pipeline.errors import InputError
from pipeline.eval.records import (
    COUNT_COLUMNS,
    as_bool,
    as_count,
    check_runs,
    per_question_scores,
    require_columns,
)


def per_dataset_metrics(
    records: pd.DataFrame, correct_col: str = "strict_correct", *, runs: int
) -> pd.DataFrame:
    """Per system and dataset: n_questions, avg@k (mean over questions of the mean over
    the k runs), pass@k (share right at least once), all@k (share right in every run)."""
    scores = per_question_scores(records, correct_col, runs=runs)
    grouped = scores.groupby(["system", "dataset"], sort=True)
    table = grouped.agg(
        n_questions=("question_id", "size"),
        avg=("score", "mean"),
        pass_=("any_correct", "mean"),
        all_=("all_correct", "mean"),
    ).reset_index()
    for name in ("avg", "pass_", "all_"):
        table[name] = table[name] * 100.0
    return table.rename(
        columns={"avg": f"avg@{runs}", "pass_": f"pass@{runs}", "all_": f"all@{runs}"}
    )


def macro_metrics(
    records: pd.DataFrame,
    correct_col: str = "strict_correct",
    *,
    runs: int,
    datasets: Sequence[str] | None = None,
) -> pd.DataFrame:
    """Per system: unweighted mean over datasets of avg@k, pass@k, all@k.

    With `datasets` given, only those count and every system must have all of them
    (the paper: the 7 test datasets); otherwise each system's datasets present count.
    """
    table = per_dataset_metrics(records, correct_col, runs=runs)
    if datasets is not None:
        wanted = list(datasets)
        for system, present in table.groupby("system")["dataset"]:
            missing = sorted(set(wanted) - set(present))
            if missing:
                raise InputError(
                    f"evaluation records: system {system!r} lacks dataset(s) {missing} "
                    f"(column 'dataset')"
                )
        table = table[table["dataset"].isin(wanted)]
    value_cols = [f"avg@{runs}", f"pass@{runs}", f"all@{runs}"]
    grouped = table.groupby("system", sort=True)
    macro = grouped[value_cols].mean()
    macro.insert(0, "n_datasets", grouped.size())
    return macro.reset_index()


def workload(records: pd.DataFrame) -> pd.DataFrame:
    """Per system: mean search actions, input tokens and output tokens per workflow
    (one record = one workflow), pooled over all records."""
    require_columns(records, ["system", *COUNT_COLUMNS])
    frame = pd.DataFrame({"system": records["system"]})
    for column in COUNT_COLUMNS:
        frame[column] = as_count(records, column)
    grouped = frame.groupby("system", sort=True)
    table = grouped.mean()
    table.insert(0, "n_workflows", grouped.size())
    return table.reset_index()


def behaviour(records: pd.DataFrame, *, runs: int) -> pd.DataFrame:
    """Per system, in percent of workflows unless named otherwise.

    no_search_share, subtask_and_report_share, final_answer_share, forced_answer_share:
    pooled over all workflows. format_failure_rate_macro: mean over datasets of the
    per-dataset rate (the paper's figure); format_failure_rate_pooled: over all
    workflows. rescued_by_flexible: count of workflows with flexible right and strict
    wrong; rescued_by_flexible_share: the same in percent, pooled.
    """
    needed = [
        "system", "question_id", "dataset", "run", "strict_correct", "flexible_correct",
        "format_failure", "search_actions", "has_subtask_and_report", "has_final_answer",
        "forced_answer",
    ]
    require_columns(records, needed)
    check_runs(records, runs)
    frame = pd.DataFrame({"system": records["system"], "dataset": records["dataset"]})
    frame["no_search"] = as_count(records, "search_actions") == 0
    frame["subtask_and_report"] = as_bool(records, "has_subtask_and_report")
    frame["final_answer"] = as_bool(records, "has_final_answer")
    frame["forced_answer"] = as_bool(records, "forced_answer")
    frame["format_failure"] = as_bool(records, "format_failure")
    frame["rescued"] = as_bool(records, "flexible_correct") & ~as_bool(records, "strict_correct")

    grouped = frame.groupby("system", sort=True)
    table = pd.DataFrame({"n_workflows": grouped.size()})
    for name in ("no_search", "subtask_and_report", "final_answer", "forced_answer"):
        table[f"{name}_share"] = grouped[name].mean() * 100.0
    per_dataset = frame.groupby(["system", "dataset"], sort=True)["format_failure"].mean()
    table["format_failure_rate_macro"] = per_dataset.groupby(level="system").mean() * 100.0
    table["format_failure_rate_pooled"] = grouped["format_failure"].mean() * 100.0
    table["rescued_by_flexible"] = grouped["rescued"].sum().astype(int)
    table["rescued_by_flexible_share"] = grouped["rescued"].mean() * 100.0
    return table.reset_index()
