"""Validation of evaluation records and the per-question score table built from them.

Records: one row per (system, question_id, run); see docs/contracts.md.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from pipeline.errors import InputError

KEY_COLUMNS = ("system", "question_id", "dataset", "run")
COUNT_COLUMNS = ("search_actions", "input_tokens", "output_tokens")


def require_columns(records: pd.DataFrame, columns: Sequence[str]) -> None:
    """Raise InputError naming every required column that `records` lacks."""
    missing = [c for c in columns if c not in records.columns]
    if missing:
        raise InputError(f"evaluation records: missing column(s) {missing}")


def as_bool(records: pd.DataFrame, column: str) -> pd.Series:
    """Column as bool; accepts bool or 0/1 values, rejects missing and other values."""
    values = records[column]
    if values.isna().any():
        raise InputError(f"evaluation records: column {column!r} has missing values")
    if pd.api.types.is_bool_dtype(values):
        return values.astype(bool)
    if pd.api.types.is_numeric_dtype(values) and values.isin([0, 1]).all():
        return values.astype(bool)
    raise InputError(f"evaluation records: column {column!r} must be bool (or 0/1)")


def as_count(records: pd.DataFrame, column: str) -> pd.Series:
    """Column as float; rejects missing, non-numeric and negative values."""
    values = records[column]
    if not pd.api.types.is_numeric_dtype(values) or pd.api.types.is_bool_dtype(values):
        raise InputError(f"evaluation records: column {column!r} must be numeric")
    if values.isna().any() or (values < 0).any():
        raise InputError(f"evaluation records: column {column!r} must be non-negative, no missing")
    return values.astype(float)


def check_runs(records: pd.DataFrame, runs: int) -> None:
    """Every (system, question_id) has exactly `runs` rows, distinct runs, one dataset."""
    require_columns(records, KEY_COLUMNS)
    for column in KEY_COLUMNS:
        if records[column].isna().any():
            raise InputError(f"evaluation records: column {column!r} has missing values")
    groups = records.groupby(["system", "question_id"], sort=True)
    stats = groups.agg(
        rows=("run", "size"), distinct_runs=("run", "nunique"), datasets=("dataset", "nunique")
    )
    bad = stats[stats["datasets"] != 1]
    if len(bad):
        system, question = bad.index[0]
        raise InputError(
            f"evaluation records: question {question!r} of system {system!r} has several "
            f"values in column 'dataset'"
        )
    bad = stats[stats["distinct_runs"] != stats["rows"]]
    if len(bad):
        system, question = bad.index[0]
        raise InputError(
            f"evaluation records: question {question!r} of system {system!r} repeats a "
            f"value of column 'run'"
        )
    bad = stats[stats["rows"] != runs]
    if len(bad):
        system, question = bad.index[0]
        raise InputError(
            f"evaluation records: question {question!r} of system {system!r} has "
            f"{int(bad['rows'].iloc[0])} runs (column 'run'); expected {runs}"
        )


def per_question_scores(
    records: pd.DataFrame, correct_col: str = "strict_correct", *, runs: int
) -> pd.DataFrame:
    """One row per (system, dataset, question_id): `score` = fraction of runs correct,
    `any_correct`, `all_correct`. Sorted by system, dataset, question_id."""
    require_columns(records, [*KEY_COLUMNS, correct_col])
    check_runs(records, runs)
    frame = records[["system", "dataset", "question_id"]].copy()
    frame["correct"] = as_bool(records, correct_col).to_numpy(dtype=np.float64)
    grouped = frame.groupby(["system", "dataset", "question_id"], sort=True)["correct"]
    scores = grouped.agg(score="mean", any_correct="max", all_correct="min").reset_index()
    scores["any_correct"] = scores["any_correct"].astype(bool)
    scores["all_correct"] = scores["all_correct"].astype(bool)
    return scores
