"""The report's scale statement, provenance line, generic curve figures and files, and the
intervals behind them (no MLflow, no stage)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.eval.bootstrap import bootstrap_macro, score_matrix
from pipeline.eval.records import per_question_scores
from pipeline.eval.synthetic import synthetic_records
from pipeline.report import figures
from pipeline.report import published as pub
from pipeline.report.curves import CURVE_METRICS, Curve, CurveMetric, questions_per_point, write_curve_files
from pipeline.report.intervals import macro_intervals
from pipeline.report.paper import code_line
from pipeline.report.results import compute_results
from pipeline.report.scale import detectable_gap, measure_scale, scale_section
from pipeline.systems import BY_NAME, SYSTEMS, TRAINED

QUOTAS = {"nq": 30, "hotpotqa": 20, "bamboogle": 10}
DRAWS, SEED, LEVEL = 500, 7, 0.95


@pytest.fixture(scope="module")
def evaluated():
    accuracy = {"multiagent_opd": 0.5, "c_mas_rl": 0.2, "h_mas_base": 0.45}
    records = pd.concat([synthetic_records(s, a, QUOTAS, seed=i) for i, (s, a) in enumerate(accuracy.items())],
                        ignore_index=True)
    systems = list(accuracy)
    results = compute_results(records, systems, [], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
    intervals = macro_intervals(records, systems, runs=4, draws=DRAWS, seed=SEED, level=LEVEL)
    return records, results, intervals


def test_system_intervals_are_the_bootstrap_percentiles(evaluated):
    records, _, intervals = evaluated
    scores = per_question_scores(records[records["system"] == "c_mas_rl"], runs=4)
    for measure, column in (("avg@4", "score"), ("pass@4", "any_correct")):
        frame = scores[["system", "dataset", "question_id"]].assign(score=scores[column].astype(float))
        matrix, sizes = score_matrix(frame, ["c_mas_rl"])
        low, high = np.percentile(bootstrap_macro(matrix, sizes, DRAWS, SEED)[:, 0], [2.5, 97.5])
        row = intervals[(intervals["system"] == "c_mas_rl") & (intervals["measure"] == measure)].iloc[0]
        assert (row["low"], row["high"]) == pytest.approx((low, high))
        assert row["low"] <= row["value"] <= row["high"] and row["questions"] == sum(QUOTAS.values())


def test_scale_statement_is_computed_from_the_runs_intervals(evaluated):
    _, results, intervals = evaluated
    scale = measure_scale(results, intervals)
    half_gaps = ((results.gaps["high"] - results.gaps["low"]) / 2).median()
    assert scale.gap_half_width == pytest.approx(half_gaps)
    assert scale.questions == sum(QUOTAS.values()) and scale.datasets == 3
    excluded = {r.baseline for r in results.gaps.itertuples() if r.low > 0 or r.high < 0}
    assert set(scale.resolved) == excluded and "c_mas_rl" in excluded  # 0.5 vs 0.2 accuracy: resolved
    smallest = min(d for d, _, _ in pub.GAPS.values())
    assert scale.questions_needed == int(np.ceil(scale.questions * (half_gaps / smallest) ** 2))
    text = scale_section(scale, "ci", "qwen3 with 10 parameters", 95, "multiagent_opd")
    assert f"±{half_gaps:.1f} points" in text and f"{len(excluded)} of 2 gaps" in text
    assert ("can neither confirm nor refute" in text) == (smallest < half_gaps)


def test_scale_statement_changes_with_the_test_size():
    small = [synthetic_records(s, 0.4, {"nq": 8}, seed=i) for i, s in enumerate(["multiagent_opd", "c_mas_rl"])]
    large = [synthetic_records(s, 0.4, {"nq": 800}, seed=i) for i, s in enumerate(["multiagent_opd", "c_mas_rl"])]
    widths = []
    for frames in (small, large):
        records = pd.concat(frames, ignore_index=True)
        results = compute_results(records, ["multiagent_opd", "c_mas_rl"], [], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
        intervals = macro_intervals(records, ["multiagent_opd", "c_mas_rl"], runs=4, draws=DRAWS, seed=SEED,
                                    level=LEVEL)
        widths.append(measure_scale(results, intervals).gap_half_width)
    assert widths[1] < widths[0] / 3  # 100x the questions: about a tenth of the width


def test_provenance_names_the_commit_only_when_it_holds_the_code():
    assert "commit `abc`" in code_line("abc") and "exactly this commit" in code_line("abc")
    dirty = code_line("abc-dirty")
    assert "uncommitted changes on top of commit `abc`" in dirty and "no commit holds" in dirty


def _curve(system: str, steps: list[int], values: dict[str, list[float]], n: dict[str, int]) -> Curve:
    return Curve(system, f"run-{system}", pd.DataFrame({"step": steps, **values}), n)


def test_any_list_of_curve_metrics_becomes_files_and_panels(tmp_path):
    metrics = [CurveMetric("dev_em", "dev EM", "shared.dev_questions"),
               CurveMetric("reward_searcher", "Searcher reward", "shared.questions_per_batch"),
               CurveMetric("never_logged", "absent", "x")]
    curves = {
        "multiagent_opd": _curve("multiagent_opd", [0, 5, 10], {"dev_em": [0.1, np.nan, 0.3],
                                                                 "reward_searcher": [0.0, 0.5, 0.7]},
                                 {"dev_em": 16, "reward_searcher": 2}),
        "c_mas_rl": _curve("c_mas_rl", [0, 10], {"dev_em": [0.2, 0.25]}, {"dev_em": 32}),
    }
    written = write_curve_files(curves, metrics, tmp_path / "curves")
    assert written == ["dev_em.csv", "reward_searcher.csv"]  # the files with data
    # a metric no system logged gets its header alone: the plot dvc.yaml names finds its file
    assert (tmp_path / "curves" / "never_logged.csv").read_text() == "step,system,questions,never_logged\n"
    dev = pd.read_csv(tmp_path / "curves" / "dev_em.csv")
    assert dev.columns[-1] == "dev_em" and len(dev) == 4  # the NaN step is dropped
    assert questions_per_point(curves, "dev_em") == "16-32" and questions_per_point(curves, "reward_searcher") == "2"
    figures.training_curves(curves, metrics, tmp_path / "curves.png")
    assert (tmp_path / "curves.png").read_bytes()[:4] == b"\x89PNG"


def test_macro_and_gap_figures_draw_any_systems(evaluated, tmp_path):
    _, results, intervals = evaluated
    figures.macro_with_intervals(intervals, {s: 30.0 for s in ("multiagent_opd", "c_mas_rl")}, "avg@4", 95, "ci",
                                 tmp_path / "macro.png")
    figures.gaps_with_intervals(results.gaps, pub.GAPS, "multiagent_opd", 95, 60, tmp_path / "gaps.png")
    assert (tmp_path / "macro.png").stat().st_size > 1000 and (tmp_path / "gaps.png").stat().st_size > 1000


def test_scores_that_never_vary_show_nothing():
    records = pd.concat([synthetic_records(s, 0.3, QUOTAS, seed=i)
                         for i, s in enumerate(["multiagent_opd", "c_mas_rl"])],
                        ignore_index=True).assign(strict_correct=False)  # an untrained model: every answer wrong
    results = compute_results(records, ["multiagent_opd", "c_mas_rl"], [], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
    intervals = macro_intervals(records, ["multiagent_opd", "c_mas_rl"], runs=4, draws=DRAWS, seed=SEED, level=LEVEL)
    text = scale_section(measure_scale(results, intervals), "ci", "m", 95, "multiagent_opd")
    assert "**Resolution:** none" in text and "can test the paper's ordering" not in text


def _all_curves() -> dict[str, Curve]:
    """Every trained system with every curve metric, over a few steps."""
    steps = [0, 4, 8, 12]
    return {s.name: _curve(s.name, steps, {m.key: [0.1 * i + 0.01 * j for j in range(len(steps))]
                                           for m in CURVE_METRICS}, {m.key: 16 for m in CURVE_METRICS})
            for i, s in enumerate(TRAINED)}


def test_figures_are_readable_at_the_report_width(evaluated, tmp_path):
    """Every figure as the report draws it: no text below 10 px at the page width the report
    uses, and no title overlapping a neighbour's title or panel."""
    _, results, intervals = evaluated
    curves = _all_curves()
    dev = [m for m in CURVE_METRICS if m.key.startswith("dev_")]
    layouts = {
        "dynamics": figures.training_curves(curves, dev, tmp_path / "d.png"),
        "diagnostics": figures.training_curves(curves, [m for m in CURVE_METRICS if m not in dev], tmp_path / "g.png"),
        "macro": figures.macro_with_intervals(intervals, {s.name: s.published_avg4 for s in SYSTEMS}, "avg@4", 95,
                                              "tiny", tmp_path / "m.png"),
        "gaps": figures.gaps_with_intervals(results.gaps, pub.GAPS, "multiagent_opd", 95, 650, tmp_path / "p.png"),
    }
    for name, layout in layouts.items():
        assert layout.width_px <= figures.PAGE_WIDTH_PX, (name, layout)
        assert layout.min_text_px >= figures.MIN_TEXT_PX, (name, layout)
        assert layout.overlaps == [], (name, layout.overlaps)


def test_the_readability_measure_sees_small_text_and_overlapping_titles():
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(6, 3), dpi=figures.DPI)
    for ax in axes:
        ax.set_title("a title long enough to run into the panel beside it, and further still", fontsize=12)
    axes[0].tick_params(labelsize=6)
    layout = figures.measure(fig, width_px=600)
    plt.close(fig)
    assert layout.min_text_px < figures.MIN_TEXT_PX  # 6 pt at 100 dpi: 8.3 px
    assert layout.overlaps
    fig, ax = plt.subplots(figsize=(6, 3), dpi=figures.DPI)
    ax.set_title("fine", fontsize=10)
    ax.tick_params(labelsize=10)
    assert figures.measure(fig, width_px=2 * figures.PAGE_WIDTH_PX).min_text_px < 10  # halved by the page
    plt.close(fig)


def test_each_system_is_drawn_in_its_registry_colour(tmp_path):
    from matplotlib.colors import to_rgb
    from matplotlib.image import imread

    curves = {name: c for name, c in _all_curves().items() if name in ("multiagent_opd", "ablation_base_teacher")}
    figures.training_curves(curves, CURVE_METRICS[:1], tmp_path / "c.png")
    pixels = imread(tmp_path / "c.png")[..., :3].reshape(-1, 3)

    def drawn(colour: str) -> bool:
        return bool((np.abs(pixels - np.array(to_rgb(colour))).max(axis=1) < 2 / 255).any())

    assert drawn(BY_NAME["multiagent_opd"].colour) and drawn(BY_NAME["ablation_base_teacher"].colour)
    assert not drawn("#1f77b4")  # matplotlib's first cycle colour: what the first line got before


def test_the_scale_section_says_what_it_can_show_under_can_show():
    records = pd.concat([synthetic_records(s, a, {"nq": 3000}, seed=i)
                         for i, (s, a) in enumerate([("multiagent_opd", 0.6), ("c_mas_rl", 0.2)])], ignore_index=True)
    results = compute_results(records, ["multiagent_opd", "c_mas_rl"], [], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
    intervals = macro_intervals(records, ["multiagent_opd", "c_mas_rl"], runs=4, draws=DRAWS, seed=SEED, level=LEVEL)
    scale = measure_scale(results, intervals)
    assert scale.gap_half_width < min(d for d, _, _ in pub.GAPS.values())  # fine enough for every published gap
    lines = {line.split("**")[1]: line for line in scale_section(scale, "ci", "m", 95, "multiagent_opd").splitlines()}
    assert "can test the paper's ordering" in lines["Can show:"]
    assert "can test" not in lines["Cannot show:"] and "None of the paper's gaps is that small" in lines["Cannot show:"]


def test_a_coarse_scale_says_it_cannot_test_the_ordering_under_cannot_show(evaluated):
    _, results, intervals = evaluated  # 60 questions: intervals wider than the paper's smallest gap
    lines = {line.split("**")[1]: line
             for line in scale_section(measure_scale(results, intervals), "ci", "m", 95, "multiagent_opd").splitlines()}
    assert "neither confirm nor refute" in lines["Cannot show:"] and "ordering" not in lines["Can show:"]


@pytest.mark.parametrize("power", [0.5, 0.8, 0.9])
def test_a_detectable_gap_excludes_zero_that_often_in_simulated_runs(power):
    half_width, level = 1.7, 95
    gap = detectable_gap(half_width, level, power)
    estimates = np.random.default_rng(0).normal(gap, half_width / 1.959964, size=40_000)  # one run's gap each
    assert np.mean(estimates - half_width > 0) == pytest.approx(power, abs=0.01)


def test_the_scale_section_states_the_power_of_its_own_resolution(evaluated):
    _, results, intervals = evaluated
    scale = measure_scale(results, intervals)
    lines = {line.split("**")[1]: line for line in scale_section(scale, "ci", "m", 95, "multiagent_opd").splitlines()}
    half = scale.gap_half_width
    assert f"a true gap of about {half:.1f} points excludes zero in about half" in lines["Power:"]
    assert f"{detectable_gap(half, 95, 0.8):.1f} points in 4 runs of 5" in lines["Power:"]
    assert f"from about {detectable_gap(half, 95, 0.8 ** 0.5):.1f} points" in lines["Power:"]
