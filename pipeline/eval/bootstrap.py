"""Paired bootstrap of macro avg@k differences between systems (docs/method.md §7).

Questions are resampled with replacement within each dataset; every system sees the
same draws; the macro score of a draw is the unweighted mean over datasets of the
mean per-question score (fraction of runs correct). Differences are in percentage
points; the interval is the percentile interval of the draws' differences.

Draws depend only on the seed and the dataset sizes (datasets sorted by name), so a
gap gets the same draws whether computed alone or with other systems, vectorised or
by the naive loop.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
import pandas as pd

from pipeline.errors import InputError
from pipeline.eval.records import as_bool, per_question_scores, require_columns


def score_matrix(
    per_question: pd.DataFrame, systems: Sequence[str]
) -> tuple[np.ndarray, np.ndarray]:
    """(systems x questions) score matrix with questions grouped by dataset (sorted by
    dataset, then question_id), and the number of questions of each dataset."""
    require_columns(per_question, ["system", "dataset", "question_id", "score"])
    for system in systems:
        if not (per_question["system"] == system).any():
            raise InputError(
                f"per-question scores: no rows for system {system!r} (column 'system')"
            )
    rows = per_question[per_question["system"].isin(list(systems))]
    keys = ["system", "dataset", "question_id"]
    duplicated = rows.duplicated(keys)
    if duplicated.any():
        first = rows[duplicated].iloc[0]
        raise InputError(
            f"per-question scores: question {first['question_id']!r} of system "
            f"{first['system']!r} appears more than once"
        )
    scores = rows["score"].to_numpy(dtype=np.float64)
    if not np.all((scores >= 0.0) & (scores <= 1.0)):
        raise InputError("per-question scores: column 'score' must lie in [0, 1], no missing")
    wide = rows.set_index(["dataset", "question_id", "system"])["score"].unstack("system")
    wide = wide.sort_index()
    gaps = wide.isna()
    if gaps.to_numpy().any():
        dataset, question = wide.index[gaps.any(axis=1).to_numpy()][0]
        lacking = [s for s in systems if gaps.loc[(dataset, question), s]]
        raise InputError(
            f"per-question scores: question {question!r} ({dataset}) is missing for "
            f"system(s) {lacking}; paired comparison needs the same questions"
        )
    matrix = wide[list(systems)].to_numpy(dtype=np.float64).T
    sizes = wide.groupby(level="dataset", sort=True).size().to_numpy()
    return matrix, sizes


def dataset_draws(sizes: np.ndarray, draws: int, seed: int) -> Iterator[np.ndarray]:
    """Resampled question indices per dataset, in dataset order: (draws x n_d) each."""
    if draws < 1:
        raise InputError(f"bootstrap: draws must be >= 1, got {draws}")
    rng = np.random.default_rng(seed)
    for n in sizes:
        yield rng.integers(0, int(n), size=(draws, int(n)))


def observed_macro(matrix: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """Macro mean score per system (percent) on the questions as observed."""
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    per_dataset = np.add.reduceat(matrix, starts, axis=1) / sizes
    return per_dataset.mean(axis=1) * 100.0


def bootstrap_macro(matrix: np.ndarray, sizes: np.ndarray, draws: int, seed: int) -> np.ndarray:
    """Macro mean score per draw and system (percent): (draws x systems).

    Each dataset's draws become counts (how often each question was drawn), so a
    dataset's resampled means are one matrix product counts @ scores.T / n_d.
    """
    total = np.zeros((draws, matrix.shape[0]))
    start = 0
    for n, indices in zip(sizes, dataset_draws(sizes, draws, seed)):
        n = int(n)
        offsets = (np.arange(draws) * n)[:, None]
        counts = np.bincount((indices + offsets).ravel(), minlength=draws * n)
        counts = counts.reshape(draws, n).astype(np.float64)
        total += counts @ matrix[:, start : start + n].T / n
        start += n
    return total / len(sizes) * 100.0


def _interval(differences: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(differences, [tail, 100.0 - tail])
    return float(low), float(high)


def paired_bootstrap_many(
    per_question: pd.DataFrame,
    target: str,
    baselines: Sequence[str] | None = None,
    *,
    draws: int,
    seed: int,
    level: float,
) -> pd.DataFrame:
    """Gap target - baseline for every baseline (default: every other system) with one
    set of draws. Columns: baseline, target, diff, low, high (percentage points)."""
    require_columns(per_question, ["system"])
    if baselines is None:
        baselines = sorted(s for s in per_question["system"].unique() if s != target)
    baselines = list(baselines)
    if not baselines:
        raise InputError(f"bootstrap: no baseline system besides target {target!r}")
    if target in baselines:
        raise InputError(f"bootstrap: target {target!r} is also listed as a baseline")
    systems = [target, *baselines]
    matrix, sizes = score_matrix(per_question, systems)
    observed = observed_macro(matrix, sizes)
    resampled = bootstrap_macro(matrix, sizes, draws, seed)
    rows = []
    for k, baseline in enumerate(baselines, start=1):
        low, high = _interval(resampled[:, 0] - resampled[:, k], level)
        rows.append(
            {"baseline": baseline, "target": target,
             "diff": float(observed[0] - observed[k]), "low": low, "high": high}
        )
    return pd.DataFrame(rows)


def paired_bootstrap(
    per_question: pd.DataFrame,
    baseline: str,
    target: str,
    *,
    draws: int,
    seed: int,
    level: float,
) -> dict[str, float]:
    """Gap target - baseline of macro avg@k: {diff, low, high} in percentage points."""
    row = paired_bootstrap_many(per_question, target, [baseline], draws=draws, seed=seed, level=level).iloc[0]
    return {"diff": float(row["diff"]), "low": float(row["low"]), "high": float(row["high"])}


def paired_bootstrap_naive(
    per_question: pd.DataFrame,
    baseline: str,
    target: str,
    *,
    draws: int,
    seed: int,
    level: float,
) -> dict[str, float]:
    """Reference loop version of `paired_bootstrap` (same draws for the same seed)."""
    matrix, sizes = score_matrix(per_question, [target, baseline])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    per_dataset_means = np.zeros((len(sizes), draws, 2))
    for d, indices in enumerate(dataset_draws(sizes, draws, seed)):
        block = matrix[:, starts[d] : starts[d] + sizes[d]]
        for b in range(draws):
            for s in range(2):
                per_dataset_means[d, b, s] = sum(block[s, i] for i in indices[b]) / sizes[d]
    macro = per_dataset_means.mean(axis=0) * 100.0
    observed = []
    for s in range(2):
        blocks = [matrix[s, starts[d] : starts[d] + sizes[d]] for d in range(len(sizes))]
        observed.append(float(np.mean([block.mean() for block in blocks])) * 100.0)
    low, high = _interval(macro[:, 0] - macro[:, 1], level)
    return {"diff": observed[0] - observed[1], "low": low, "high": high}


def repaired_records(
    records: pd.DataFrame, systems: Sequence[str], correct_col: str = "strict_correct"
) -> pd.DataFrame:
    """Copy of `records` where every format failure of `systems` counts as correct."""
    require_columns(records, ["system", "format_failure", correct_col])
    repaired = records.copy()
    failed = as_bool(records, "format_failure") & records["system"].isin(list(systems))
    correct = as_bool(records, correct_col)
    repaired[correct_col] = correct | failed
    return repaired


def perfect_repair_gaps(
    records: pd.DataFrame,
    target: str,
    baselines: Sequence[str] | None = None,
    correct_col: str = "strict_correct",
    *,
    runs: int,
    draws: int,
    seed: int,
    level: float,
) -> pd.DataFrame:
    """Perfect-repair bound: gaps target - baseline as if every format failure of each
    baseline were correct (the target is left as it is). Same columns as
    `paired_bootstrap_many`."""
    require_columns(records, ["system"])
    if baselines is None:
        baselines = sorted(s for s in records["system"].unique() if s != target)
    repaired = repaired_records(records, [b for b in baselines if b != target], correct_col)
    scores = per_question_scores(repaired, correct_col, runs=runs)
    return paired_bootstrap_many(scores, target, baselines, draws=draws, seed=seed, level=level)


def perfect_repair_gap(
    records: pd.DataFrame,
    baseline: str,
    target: str,
    correct_col: str = "strict_correct",
    *,
    runs: int,
    draws: int,
    seed: int,
    level: float,
) -> dict[str, float]:
    """Perfect-repair gap target - baseline: {diff, low, high} in percentage points."""
    row = perfect_repair_gaps(
        records, target, [baseline], correct_col, runs=runs, draws=draws, seed=seed, level=level
    ).iloc[0]
    return {"diff": float(row["diff"]), "low": float(row["low"]), "high": float(row["high"])}
