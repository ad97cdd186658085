"""Paired, dataset-stratified bootstrap of macro avg@4 gaps."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.eval.bootstrap import (
    paired_bootstrap,
    paired_bootstrap_many,
    paired_bootstrap_naive,
    perfect_repair_gap,
    perfect_repair_gaps,
)
from pipeline.eval.metrics import macro_metrics
from pipeline.eval.records import per_question_scores
from tests.helpers.configs import EVAL


def scores_frame(scores: dict[str, dict[str, list[float]]]) -> pd.DataFrame:
    """system -> dataset -> per-question scores (question ids shared across systems)."""
    rows = [
        {"system": system, "dataset": dataset, "question_id": f"{dataset}-{i}", "score": s}
        for system, datasets in scores.items()
        for dataset, values in datasets.items()
        for i, s in enumerate(values)
    ]
    return pd.DataFrame(rows)


def random_scores(systems: list[str], sizes: dict[str, int], seed: int) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return scores_frame(
        {s: {d: list(rng.integers(0, 5, n) / 4) for d, n in sizes.items()} for s in systems}
    )


def records_from(correct: dict[str, dict[str, list[list[int]]]], failures=None) -> pd.DataFrame:
    """system -> dataset -> per question the 4 runs' correctness; failures: set of
    (system, dataset, question index, run) with a format failure."""
    failures = failures or set()
    rows = []
    for system, datasets in correct.items():
        for dataset, questions in datasets.items():
            for i, runs in enumerate(questions):
                for run, c in enumerate(runs):
                    rows.append(
                        {
                            "system": system, "dataset": dataset,
                            "question_id": f"{dataset}-{i}", "run": run,
                            "strict_correct": bool(c),
                            "format_failure": (system, dataset, i, run) in failures,
                        }
                    )
    return pd.DataFrame(rows)


def test_vectorised_equals_naive() -> None:
    frame = random_scores(["a", "b"], {"nq": 5, "popqa": 7, "bamboogle": 3}, seed=1)
    fast = paired_bootstrap(frame, "b", "a", draws=300, seed=7, level=EVAL.confidence)
    slow = paired_bootstrap_naive(frame, "b", "a", draws=300, seed=7, level=EVAL.confidence)
    assert fast == pytest.approx(slow, abs=1e-9)
    assert fast["low"] < fast["high"]


def test_many_form_matches_single_form() -> None:
    frame = random_scores(["opd", "critic", "teacher", "base"], {"nq": 20, "hotpotqa": 15}, 2)
    many = paired_bootstrap_many(frame, "opd", draws=500, seed=11, level=EVAL.confidence)
    assert sorted(many["baseline"]) == ["base", "critic", "teacher"]
    for _, gap in many.iterrows():
        single = paired_bootstrap(frame, gap["baseline"], "opd", draws=500, seed=11, level=EVAL.confidence)
        assert (gap["diff"], gap["low"], gap["high"]) == pytest.approx(
            (single["diff"], single["low"], single["high"]), abs=1e-9
        )


def test_observed_diff_equals_macro_metrics_gap() -> None:
    correct = {
        "opd": {"nq": [[1, 1, 0, 0], [1, 1, 1, 1]], "bamboogle": [[0, 0, 0, 1]]},
        "critic": {"nq": [[0, 0, 0, 0], [1, 0, 1, 0]], "bamboogle": [[1, 1, 1, 1]]},
    }
    records = records_from(correct)
    gap = paired_bootstrap(per_question_scores(records, runs=EVAL.runs), "critic", "opd", draws=200, seed=0,
                           level=EVAL.confidence)
    macro = macro_metrics(records, runs=EVAL.runs).set_index("system")["avg@4"]
    assert gap["diff"] == pytest.approx(macro["opd"] - macro["critic"])
    # by hand: opd (75 + 25) / 2 = 50, critic (25 + 100) / 2 = 62.5
    assert gap["diff"] == pytest.approx(-12.5)


def test_same_draws_for_both_systems() -> None:
    # Identical scores except one dataset where the target is always right and the
    # baseline always wrong: paired draws give the same gap in every draw.
    varied = list(np.linspace(0, 1, 9))
    frame = scores_frame(
        {"t": {"nq": varied, "popqa": [1.0] * 6}, "b": {"nq": varied, "popqa": [0.0] * 6}}
    )
    gap = paired_bootstrap(frame, "b", "t", draws=400, seed=3, level=EVAL.confidence)
    assert gap["diff"] == pytest.approx(50.0)
    assert gap["low"] == pytest.approx(50.0) and gap["high"] == pytest.approx(50.0)


def test_resampling_is_within_datasets() -> None:
    # Scores constant inside each dataset: within-dataset resampling cannot move the
    # per-dataset means, pooled resampling would.
    frame = scores_frame(
        {
            "t": {"nq": [1.0] * 4, "musique": [0.5] * 10},
            "b": {"nq": [0.0] * 4, "musique": [0.5] * 10},
        }
    )
    gap = paired_bootstrap(frame, "b", "t", draws=400, seed=3, level=EVAL.confidence)
    assert (gap["diff"], gap["low"], gap["high"]) == pytest.approx((50.0, 50.0, 50.0))


def test_seed_determines_the_interval() -> None:
    frame = random_scores(["a", "b"], {"nq": 30, "popqa": 30}, seed=4)
    first = paired_bootstrap(frame, "b", "a", draws=300, seed=5, level=EVAL.confidence)
    assert paired_bootstrap(frame.iloc[::-1], "b", "a", draws=300, seed=5, level=EVAL.confidence) == first
    other = paired_bootstrap(frame, "b", "a", draws=300, seed=6, level=EVAL.confidence)
    assert other["diff"] == first["diff"] and other["low"] != first["low"]


def test_unpaired_questions_and_bad_systems_are_rejected() -> None:
    frame = random_scores(["a", "b"], {"nq": 5}, seed=0)
    with pytest.raises(InputError, match="nq-2"):
        paired_bootstrap(frame.drop(index=frame.index[(frame["system"] == "b")][2]), "b", "a",
                         draws=EVAL.bootstrap_draws, seed=EVAL.bootstrap_seed, level=EVAL.confidence)
    with pytest.raises(InputError, match="'zz'"):
        paired_bootstrap(frame, "zz", "a", draws=EVAL.bootstrap_draws, seed=EVAL.bootstrap_seed, level=EVAL.confidence)
    with pytest.raises(InputError, match="also listed"):
        paired_bootstrap_many(frame, "a", ["a", "b"], draws=EVAL.bootstrap_draws, seed=EVAL.bootstrap_seed,
                              level=EVAL.confidence)
    bad = frame.copy()
    bad.loc[0, "score"] = 1.5
    with pytest.raises(InputError, match="score"):
        paired_bootstrap(bad, "b", "a", draws=EVAL.bootstrap_draws, seed=EVAL.bootstrap_seed, level=EVAL.confidence)


def test_perfect_repair_counts_baseline_format_failures_as_correct() -> None:
    correct = {
        "opd": {"nq": [[1, 1, 0, 0], [1, 1, 1, 1]], "bamboogle": [[0, 0, 0, 1]]},
        "critic": {"nq": [[0, 0, 0, 0], [1, 0, 1, 0]], "bamboogle": [[0, 0, 0, 0]]},
    }
    failures = {
        ("critic", "nq", 0, 0), ("critic", "nq", 0, 1),  # repaired: nq-0 becomes 0.5
        ("critic", "bamboogle", 0, 3),  # repaired: bamboogle-0 becomes 0.25
        ("opd", "bamboogle", 0, 0),  # the target is never repaired
    }
    records = records_from(correct, failures)
    gap = perfect_repair_gap(records, "critic", "opd", draws=300, seed=1, runs=EVAL.runs, level=EVAL.confidence)
    # opd (75 + 25) / 2 = 50; repaired critic ((50 + 50) / 2 + 25) / 2 = 37.5
    assert gap["diff"] == pytest.approx(12.5)
    assert gap["low"] <= gap["diff"] <= gap["high"]
    many = perfect_repair_gaps(records, "opd", draws=300, seed=1, runs=EVAL.runs, level=EVAL.confidence).iloc[0]
    assert (many["diff"], many["low"], many["high"]) == pytest.approx(
        (gap["diff"], gap["low"], gap["high"])
    )


def test_interval_covers_the_true_gap_about_95_percent() -> None:
    """200 synthetic evaluations with a known population gap of 10 points."""
    rng = np.random.default_rng(20260912)
    shifts = {"nq": 0.0, "hotpotqa": 0.1, "bamboogle": -0.1}
    n, trials, covered = 40, 200, 0
    for trial in range(trials):
        scores: dict[str, dict[str, list[float]]] = {"t": {}, "b": {}}
        for dataset, shift in shifts.items():
            difficulty = rng.uniform(0, 1, n)
            p_base = 0.15 + shift + 0.5 * difficulty  # within [0.05, 0.75]
            scores["b"][dataset] = list(rng.binomial(4, p_base) / 4)
            scores["t"][dataset] = list(rng.binomial(4, p_base + 0.10) / 4)
        gap = paired_bootstrap(scores_frame(scores), "b", "t", draws=500, seed=trial, level=EVAL.confidence)
        covered += gap["low"] <= 10.0 <= gap["high"]
    assert 0.88 * trials <= covered <= 0.99 * trials, covered
