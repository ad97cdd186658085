"""Paired bootstrap at paper scale: 8 systems x 5,000 questions x 4 runs x 4,000 draws.

Prints the seconds for all 7 gaps (OPD vs every other system, one set of draws),
peak RSS, PASS/FAIL against the 5 s target, and the agreement with the naive loop on
a small case. Run: .venv/bin/python benchmarks/bench_bootstrap.py
"""

from __future__ import annotations

import resource
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.config import load_params
from pipeline.eval.bootstrap import paired_bootstrap, paired_bootstrap_many, paired_bootstrap_naive
from pipeline.eval.records import per_question_scores

QUOTAS = {
    "nq": 812, "triviaqa": 812, "popqa": 812, "hotpotqa": 813,
    "2wiki": 813, "musique": 813, "bamboogle": 125,
}
SYSTEMS = {
    "multiagent_opd": 0.387, "cmas_base": 0.251, "cmas_rl": 0.361, "hmas_base": 0.286,
    "prompted_critic": 0.346, "abl_outcome_rl": 0.178, "abl_base_teacher": 0.295,
    "abl_no_searcher_sup": 0.298,
}
EVAL = load_params(Path(__file__).resolve().parents[1] / "params.yaml").common.eval
RUNS, DRAWS, SEED, LEVEL, TARGET_S = EVAL.runs, EVAL.bootstrap_draws, EVAL.bootstrap_seed, EVAL.confidence, 5.0


def synthetic_records(seed: int = 0) -> pd.DataFrame:
    """One row per (system, question, run) with the columns the scores need."""
    rng = np.random.default_rng(seed)
    datasets = np.repeat(list(QUOTAS), list(QUOTAS.values()))
    question_ids = np.array([f"q{i:05d}" for i in range(len(datasets))])
    difficulty = rng.uniform(-1, 1, len(datasets))
    frames = []
    for system, accuracy in SYSTEMS.items():
        p = np.clip(accuracy + 0.3 * difficulty, 0, 1)
        correct = rng.random((len(datasets), RUNS)) < p[:, None]
        frames.append(
            pd.DataFrame(
                {
                    "system": system,
                    "question_id": np.repeat(question_ids, RUNS),
                    "dataset": np.repeat(datasets, RUNS),
                    "run": np.tile(np.arange(RUNS), len(datasets)),
                    "strict_correct": correct.ravel(),
                }
            )
        )
    return pd.concat(frames, ignore_index=True)


def peak_rss_mib() -> float:
    unit = 1 if sys.platform == "darwin" else 1024  # ru_maxrss: bytes on macOS, KiB on Linux
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * unit / 2**20


def main() -> None:
    records = synthetic_records()
    print(f"records: {len(records):,} rows, {len(SYSTEMS)} systems, peak RSS so far "
          f"{peak_rss_mib():.0f} MiB")

    start = time.perf_counter()
    scores = per_question_scores(records, runs=RUNS)
    scores_s = time.perf_counter() - start

    start = time.perf_counter()
    gaps = paired_bootstrap_many(scores, "multiagent_opd", draws=DRAWS, seed=SEED, level=LEVEL)
    boot_s = time.perf_counter() - start

    print(gaps.to_string(index=False, float_format=lambda v: f"{v:+.2f}"))
    print(f"per-question scores: {scores_s:.2f} s")
    print(f"bootstrap, 7 gaps x {DRAWS:,} draws: {boot_s:.2f} s "
          f"({'PASS' if boot_s <= TARGET_S else 'FAIL'}, target <= {TARGET_S:.0f} s)")
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")

    small = scores[scores["question_id"].isin(scores["question_id"].unique()[::100])]
    start = time.perf_counter()
    fast = paired_bootstrap(small, "prompted_critic", "multiagent_opd", draws=DRAWS, seed=SEED, level=LEVEL)
    fast_s = time.perf_counter() - start
    start = time.perf_counter()
    slow = paired_bootstrap_naive(
        small, "prompted_critic", "multiagent_opd", draws=DRAWS, seed=SEED, level=LEVEL
    )
    slow_s = time.perf_counter() - start
    worst = max(abs(fast[k] - slow[k]) for k in fast)
    n_small = small["question_id"].nunique()
    print(f"naive agreement ({n_small} questions, {DRAWS:,} draws): max |diff| {worst:.2e} "
          f"({'PASS' if worst < 1e-9 else 'FAIL'}); vectorised {fast_s:.3f} s, "
          f"naive {slow_s:.2f} s, ratio {slow_s / fast_s:.0f}x")


if __name__ == "__main__":
    main()
