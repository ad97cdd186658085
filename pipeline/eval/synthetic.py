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


def with_funnel(records: pd.DataFrame, workflow: str, fidelity: float = 0.5, seed: int = 0) -> pd.DataFrame:
    """`records` with the funnel's columns (pipeline.eval.funnel): kinds of question by question
    index, steps that a correct workflow mostly passed, Searcher calls of which a share `fidelity`
    kept the hop answer they read."""
    rng = np.random.default_rng(seed)
    n = len(records)
    index = records["question_id"].str.extract(r"q(\d+)$")[0].astype(int).to_numpy()
    kinds = np.array(["single-hop", "bridge", "composition", "comparison"])[index % 4]
    hops = np.where(kinds == "single-hop", 1, np.where(kinds == "composition", 3, 2))
    correct = records["strict_correct"].to_numpy(bool)
    retrieved = correct | (rng.random(n) < 0.6)
    reported = retrieved & (correct | (rng.random(n) < 0.5))
    handed = reported & (correct | (rng.random(n) < 0.7))
    calls = rng.integers(1, 4, n) if workflow == "hierarchy" else np.ones(n, dtype=int)
    read = np.minimum(calls, retrieved.astype(int) + (rng.random(n) < 0.3))
    kept = rng.binomial(read, fidelity)
    chain = (kinds != "comparison") & (hops >= 2) & (workflow == "hierarchy")
    out = records.copy()
    out["workflow"] = workflow
    out["family"] = kinds
    out["n_hops"] = pd.array(hops, dtype="Int64")
    out["hop_retrieved"] = [[bool(r)] * int(h) for r, h in zip(retrieved, hops)]
    out["hop_reported"] = [[bool(r)] * int(h) for r, h in zip(reported, hops)]
    out["hop_handed"] = [[bool(r)] * int(h) for r, h in zip(handed, hops)]
    out["answer_retrieved"], out["answer_reported"], out["handed"] = retrieved, reported, handed
    out["searcher_calls"], out["searcher_calls_read"], out["searcher_calls_kept"] = calls, read, kept
    out["leader_waves"] = calls if workflow == "hierarchy" else 0
    out["bridge_used"] = pd.array([bool(rng.random() < 0.4) if c else None for c in chain], dtype="boolean")
    return out
