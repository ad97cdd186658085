"""Synthetic evaluation records with every contract column (tests and benchmarks only)."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd


def synthetic_records(system: str, accuracy: float, quotas: Mapping[str, int], runs: int = 4,
                      seed: int = 0, format_failure: float = 0.02) -> pd.DataFrame:
    """Records of one system: question q{i} of each dataset, `runs` runs each.

    Question difficulty depends only on the question index (the same across systems), so
    paired comparisons behave as for real systems.
    """
    datasets = np.repeat(list(quotas), list(quotas.values()))
    n = len(datasets)
    difficulty = np.random.default_rng(12345).uniform(-1, 1, n)
    rng = np.random.default_rng(seed)
    p = np.clip(accuracy + 0.3 * difficulty, 0, 1)
    correct = (rng.random((n, runs)) < p[:, None]).ravel()
    failed = (rng.random(n * runs) < format_failure) & ~correct
    searches = rng.poisson(3, n * runs)
    rescued = failed & (rng.random(n * runs) < 0.5)
    return pd.DataFrame({
        "system": system,
        "question_id": np.repeat([f"{d}-q{i:05d}" for i, d in enumerate(datasets)], runs),
        "dataset": np.repeat(datasets, runs),
        "run": np.tile(np.arange(runs), n),
        "strict_answer": np.where(failed, None, np.where(correct, "paris", "london")),
        "flexible_answer": np.where(failed & ~rescued, None, np.where(correct | rescued, "paris", "london")),
        "strict_correct": correct,
        "flexible_correct": correct | rescued,
        "format_failure": failed,
        "search_actions": searches,
        "input_tokens": 400 + 300 * searches + rng.integers(0, 100, n * runs),
        "output_tokens": 50 + 20 * searches,
        "has_subtask_and_report": searches > 0,
        "has_final_answer": ~failed,
        "forced_answer": rng.random(n * runs) < 0.05,
    })
