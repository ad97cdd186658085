"""Input checks shared by the RL maths: bad tables raise InputError naming the column."""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from pipeline.errors import InputError


def require_columns(df: pd.DataFrame, columns: Iterable[str], table: str) -> None:
    """Raise InputError listing the columns of `table` that are missing."""
    missing = [c for c in columns if c not in df.columns]
    if missing:
        raise InputError(f"{table}: missing column(s) {', '.join(missing)}")


def require_roles(samples: pd.DataFrame, allowed: Iterable[str], what: str) -> None:
    """Raise InputError if `samples.role` holds a role outside `allowed`."""
    allowed = set(allowed)
    bad = sorted(set(samples["role"]) - allowed)
    if bad:
        raise InputError(f"samples.role: {what} expects roles {sorted(allowed)}, found {bad}")


def require_finite(values: pd.Series, column: str, what: str) -> None:
    """Raise InputError if `values` (a numeric column) has NaN or inf."""
    arr = np.asarray(values, dtype=np.float64)
    if not np.isfinite(arr).all():
        raise InputError(f"{column}: expected finite numbers for {what}, found NaN/inf")


def require_unique(df: pd.DataFrame, column: str, table: str) -> None:
    """Raise InputError if `column` of `table` has duplicate values."""
    dup = df[column].duplicated()
    if dup.any():
        raise InputError(f"{table}.{column}: expected unique values, duplicate {df.loc[dup, column].iloc[0]!r}")
