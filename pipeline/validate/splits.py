"""Great Expectations suite for data/splits: no leakage, quotas met, well-formed rows."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import great_expectations as gx
import pandas as pd

from pipeline.data.normalize import normalize_question
from pipeline.errors import InputError
from pipeline.validate.gx_runner import TableCheck, ValidationOutcome, check, run_table_checks

SPLIT_COLUMNS = ["dataset", "split", "id", "question", "golden_answers", "norm_question"]
NOT_BLANK = r"\S"


def validate_splits(
    train: pd.DataFrame,
    dev: pd.DataFrame,
    test: pd.DataFrame,
    test_quotas: dict[str, int],
    docs_dir: Path,
) -> ValidationOutcome:
    """Check the three splits with GE and write Data Docs under `docs_dir`."""
    rows = split_rows({"train": train, "dev": dev, "test": test})
    tables = [
        TableCheck("rows", rows, ["file", "dataset", "id"], _row_expectations()),
        TableCheck("question_splits", question_splits(rows), ["norm_question", "split"],
                   _leak_expectations()),
        TableCheck("test_quotas", quota_counts(test, test_quotas), ["dataset", "expected", "actual"],
                   _quota_expectations()),
    ]
    return run_table_checks("splits", tables, docs_dir)


def split_rows(frames: dict[str, pd.DataFrame]) -> pd.DataFrame:
    """All rows of all splits, with derived columns the row expectations test."""
    parts = []
    for file, frame in frames.items():
        missing = [c for c in SPLIT_COLUMNS if c not in frame.columns]
        if missing:
            raise InputError(f"{file} split lacks columns {missing}; expected {SPLIT_COLUMNS}")
        part = frame[SPLIT_COLUMNS].copy()
        part.insert(0, "file", file)
        parts.append(part)
    rows = pd.concat(parts, ignore_index=True)
    answers = rows.pop("golden_answers").map(_as_list)
    rows["answer_count"] = answers.map(len)
    rows["blank_alias_count"] = answers.map(lambda aliases: sum(not _is_text(a) for a in aliases))
    rows["expected_norm_question"] = rows["question"].map(
        lambda q: normalize_question(q) if _is_text(q) else ""
    )
    return rows


def question_splits(rows: pd.DataFrame) -> pd.DataFrame:
    """Distinct (norm_question, split) pairs: a question in two splits appears twice."""
    pairs = rows[["norm_question", "split"]].drop_duplicates()
    return pairs.sort_values(["norm_question", "split"], na_position="last").reset_index(drop=True)


def quota_counts(test: pd.DataFrame, test_quotas: dict[str, int]) -> pd.DataFrame:
    """Per dataset: the quota (0 when none) and the test count (0 when absent)."""
    actual = test["dataset"].value_counts()
    datasets = sorted(set(test_quotas) | set(actual.index))
    return pd.DataFrame(
        {
            "dataset": datasets,
            "expected": [int(test_quotas.get(d, 0)) for d in datasets],
            "actual": [int(actual.get(d, 0)) for d in datasets],
        }
    )


def _row_expectations() -> list[Any]:
    E = gx.expectations
    return [
        check(E.ExpectColumnPairValuesToBeEqual(column_A="split", column_B="file"),
              "each row's split column names the split it is stored in"),
        check(E.ExpectColumnValuesToNotBeNull(column="dataset"), "dataset is set"),
        check(E.ExpectColumnValuesToNotBeNull(column="id"), "id is set"),
        check(E.ExpectCompoundColumnsToBeUnique(column_list=["dataset", "id"]),
              "(dataset, id) is unique across train, dev and test"),
        check(E.ExpectColumnValuesToNotBeNull(column="question"), "question is set"),
        check(E.ExpectColumnValuesToMatchRegex(column="question", regex=NOT_BLANK),
              "question is not empty or blank"),
        check(E.ExpectColumnValuesToMatchRegex(column="norm_question", regex=NOT_BLANK),
              "normalised question is not empty"),
        check(E.ExpectColumnPairValuesToBeEqual(column_A="norm_question", column_B="expected_norm_question"),
              "norm_question equals normalize_question(question)"),
        check(E.ExpectColumnValuesToBeBetween(column="answer_count", min_value=1),
              "golden_answers has at least one alias"),
        check(E.ExpectColumnValuesToBeBetween(column="blank_alias_count", min_value=0, max_value=0),
              "golden_answers has no empty alias"),
    ]


def _leak_expectations() -> list[Any]:
    return [
        check(gx.expectations.ExpectColumnValuesToBeUnique(column="norm_question"),
              "no normalised question sits in two splits (leak)"),
    ]


def _quota_expectations() -> list[Any]:
    return [
        check(gx.expectations.ExpectColumnPairValuesToBeEqual(column_A="expected", column_B="actual"),
              "each dataset's test count equals its quota"),
    ]


def _as_list(value: Any) -> list[Any]:
    """golden_answers as a list: parquet gives numpy arrays, missing gives []."""
    if value is None or (isinstance(value, float) and pd.isna(value)):
        return []
    if isinstance(value, str):
        return [value]
    return list(value)


def _is_text(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""
