"""The report's "Where the points go" (pipeline.report.points): its tables, figure, draw-record
field, across-draws rows and metrics files, on synthetic records with the funnel's columns."""

from __future__ import annotations

import copy
import json

import pandas as pd
import pytest

from pipeline.draws.record import check_record, draw_record
from pipeline.errors import InputError
from pipeline.eval.funnel_metrics import BY_KEY, paired_rate_gap
from pipeline.eval.synthetic import synthetic_records, with_funnel
from pipeline.report import across_draws as ad
from pipeline.report import comparisons as cmp
from pipeline.report import figures
from pipeline.report.metrics_json import metrics_dict
from pipeline.report.points import PAIRS, measure_points, pair_key, points_section, record_entry
from pipeline.report.results import compute_results
from pipeline.systems import BY_NAME, SYSTEMS

QUOTAS = {"nq": 12, "hotpotqa": 12, "bamboogle": 8}
DRAWS, SEED, LEVEL = 200, 11, 0.95


@pytest.fixture(scope="module")
def run():
    """Every system's records; all but the Prompted Critic's carry the funnel (as if evaluated
    before it existed)."""
    frames, funnel = [], []
    for i, s in enumerate(SYSTEMS):
        records = synthetic_records(s.name, 0.2 + 0.03 * i, QUOTAS, seed=i)
        if s.name != "prompted_critic":
            records = with_funnel(records, s.workflow, fidelity=0.3 + 0.05 * i, seed=i)
            funnel.append(s.name)
        frames.append(records)
    records = pd.concat(frames, ignore_index=True)
    present = [s.name for s in SYSTEMS]
    return records, present, measure_points(records, funnel, DRAWS, SEED, LEVEL)


def test_the_section_prints_the_funnel_roles_and_gaps(run):
    records, present, points = run
    text = points_section(points, present, 95, DRAWS, "figures/funnel.png")
    for needle in ("**The funnel**", "lost at retrieval", "single-hop: retrieved → reported", "Searcher fidelity (%)",
                   "![Where each system", "Not measured for Prompted Critic"):
        assert needle in text, needle
    opd, base = "multiagent_opd", "h_mas_base"
    gap = paired_rate_gap(records[records["system"].isin([opd, base])], opd, base, BY_KEY["searcher_fidelity"],
                          draws=DRAWS, seed=SEED, level=LEVEL)
    assert points.gaps[pair_key(opd, base)]["searcher_fidelity"] == gap
    assert f"{gap['diff']:+.2f} [{gap['low']:.2f}, {gap['high']:.2f}]" in text
    # the pair with the Prompted Critic is not measured: its records lack the funnel
    assert pair_key(opd, "prompted_critic") not in points.gaps
    row = next(line for line in text.splitlines() if line.startswith(f"| {BY_NAME[opd].label} - Prompted"))
    assert row.count("not measured") == 3


def test_no_funnel_anywhere_says_not_measured(run):
    _, present, _ = run
    empty = measure_points(pd.DataFrame(), [], DRAWS, SEED, LEVEL)
    assert points_section(empty, present, 95, DRAWS, None).startswith("Not measured")
    assert record_entry(empty) is None


def test_the_figure_stacks_to_100_and_keeps_the_page_rules(run, tmp_path):
    _, _, points = run
    table = points.table
    sums = table[["correct", "lost at Answerer", "lost at hand-off", "lost at report", "lost at retrieval"]].sum(axis=1)
    assert sums.to_numpy() == pytest.approx(100.0)
    layout = figures.funnel_bars(table, ("single-hop", "2-hop", "3-hop", "comparison"), tmp_path / "f.png")
    assert (tmp_path / "f.png").stat().st_size > 1000
    assert layout.min_text_px >= figures.MIN_TEXT_PX and not layout.overlaps
    assert figures.funnel_bars(table.iloc[:0], ("single-hop",), tmp_path / "none.png") is None


def test_the_draw_record_and_across_draws_carry_the_role_gaps(run, tmp_path):
    records, present, points = run
    results = compute_results(records, present, [], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
    record = draw_record(profile="ci", identity={"seed_set": "A", "cpu": "cpu", "precision": "bf16"},
                         test_questions=sum(QUOTAS.values()), level=95, results=results,
                         gaps=cmp.measure_gaps(records, present, 4, DRAWS, SEED, LEVEL), kl_ends={}, dedup=None,
                         funnel=record_entry(points))
    record = json.loads(json.dumps(record))
    check_record(record, tmp_path / "draw.json", "ci")
    assert (record["seed_set"], record["cpu"], record["precision"], record["hashes"]) == ("A", "cpu", "bf16", None)
    key = pair_key("c_mas_rl", "c_mas_base")
    assert record["funnel"]["comparisons"][key]["searcher_fidelity"]["diff"] == pytest.approx(
        points.gaps[key]["searcher_fidelity"]["diff"])
    old = {k: v for k, v in record.items() if k != "funnel"}  # a draw kept before the funnel existed
    check_record(old, tmp_path / "old.json", "ci")
    rows = [ad.DrawRow("old", old, False, False), ad.DrawRow("new", record, True, False)]
    section = ad.role_level_section(rows, 95)
    fidelity = section.split("*Searcher fidelity")[1].split("*searches per")[0]
    old_row = next(line for line in fidelity.splitlines() if line.startswith("| old "))
    assert old_row.count(ad.NOT_MEASURED) == len(PAIRS)
    assert "interval above 0 |" in fidelity
    broken = copy.deepcopy(record)
    broken["funnel"]["comparisons"][key]["searcher_fidelity"]["low"] = "wide"
    with pytest.raises(InputError, match=f"funnel.comparisons.{key}.searcher_fidelity.low"):
        check_record(broken, tmp_path / "broken.json", "ci")


def test_metrics_json_holds_each_systems_rates(run):
    records, present, points = run
    results = compute_results(records, present, [], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
    metrics = metrics_dict(results, "ci", points)
    opd = metrics["systems"]["multiagent_opd"]["funnel"]
    assert opd["searcher_fidelity"] == pytest.approx(points.rate("multiagent_opd", "searcher_fidelity"), abs=1e-4)
    assert {"all_retrieved", "single-hop_correct", "comparison_handed"} <= set(opd)
    assert "funnel" not in metrics["systems"]["prompted_critic"]
    assert pair_key("multiagent_opd", "h_mas_base") in metrics["funnel_gaps"]


def _with_stated(records: pd.DataFrame, seed: int = 0) -> pd.DataFrame:
    """Records with the facts-read columns (pipeline.eval.stated_reads.COLUMNS): stating reads a
    subset of the string test's reads, misses a share of them."""
    import numpy as np

    rng = np.random.default_rng(seed)
    out = records.copy()
    stated = rng.binomial(out["searcher_calls_read"].to_numpy(int), 0.9)
    kept = rng.binomial(stated, 0.6)
    copied = rng.binomial(stated - kept, 0.4)
    out["searcher_calls_stated"], out["searcher_calls_stated_kept"] = stated, kept
    out["miss_copied_wrong"], out["miss_other_verbatim"] = copied, stated - kept - copied
    out["miss_other_copied_wrong"], out["miss_empty"] = 0, 0
    out["hop_stated"] = [[bool(v) and rng.random() < 0.8 for v in hops] for hops in out["hop_retrieved"]]
    return out


def test_facts_read_reach_the_section_the_gaps_and_metrics(run):
    records, present, _ = run
    funnel = [s.name for s in SYSTEMS if s.name != "prompted_critic"]
    stated = pd.concat([_with_stated(records[records["system"] == s], i) for i, s in enumerate(funnel)])
    points = measure_points(stated, funnel, DRAWS, SEED, LEVEL, stated=funnel)
    text = points_section(points, present, 95, DRAWS, None)
    assert "**Facts read**" in text and "fidelity on the stating passage" in text.lower()
    base = stated[stated["system"] == "c_mas_base"]
    single = base[base["family"] == "single-hop"]
    expected = 100 * single["searcher_calls_stated_kept"].sum() / single["searcher_calls_stated"].sum()
    row = next(line for line in text.splitlines() if line.startswith("| C-MAS base |") and " / " in line)
    assert f"/ {expected:.1f} |" in row
    gap = points.gaps[pair_key("multiagent_opd", "h_mas_base")]["searcher_fidelity_stated"]
    assert gap is not None and gap["low"] <= gap["diff"] <= gap["high"]
    metrics = metrics_dict(compute_results(stated, funnel, [], "multiagent_opd", 4, DRAWS, SEED, LEVEL),
                           "ci", points)
    figures_ = metrics["systems"]["c_mas_base"]["funnel"]
    assert figures_["single-hop_fidelity_stated"] == pytest.approx(expected, abs=1e-3)
    assert "searcher_fidelity_stated" in record_entry(points)["rates"]["c_mas_base"]
    # one system without the columns: no facts-read figures for anyone (they would not be comparable)
    assert not measure_points(stated, funnel, DRAWS, SEED, LEVEL, stated=funnel[1:]).stated
