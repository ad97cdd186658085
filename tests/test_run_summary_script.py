"""scripts/run_summary.py: every figure it prints is read from the run's own files."""

from __future__ import annotations

import importlib.util
import json
import shutil

import pandas as pd
import pytest

from pipeline.errors import InputError

from .conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "run_summary.py"
STAGE_ONE = "c_mas_rl-c_mas_base"


def _load():
    spec = importlib.util.spec_from_file_location("run_summary_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def run(tmp_path):
    """A checkout's report (the committed one) with a Stage-I gap and timings of our own."""
    (tmp_path / "reports").mkdir()
    shutil.copy(REPO_ROOT / "reports" / "metrics.json", tmp_path / "reports" / "metrics.json")
    shutil.copytree(REPO_ROOT / "reports" / "tiny" / "curves", tmp_path / "reports" / "tiny" / "curves")
    record = json.loads((REPO_ROOT / "reports" / "tiny" / "draw.json").read_text())
    record["comparisons"][STAGE_ONE].update(diff=9.8711, low=1.2298, high=4.5649)
    (tmp_path / "reports" / "tiny" / "draw.json").write_text(json.dumps(record))
    (tmp_path / "data").mkdir()
    timings = [{"stage": "splits", "seconds": 60, "peak_rss_mb": 900.0},
               {"stage": "base_model", "seconds": 500, "peak_rss_mb": 4200.4},
               {"stage": "splits", "seconds": 30, "peak_rss_mb": 800.0},
               {"stage": "report", "seconds": 30, "peak_rss_mb": 700.0}]
    (tmp_path / "data" / "timings.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timings))
    return tmp_path


def test_the_summary_quotes_the_runs_files(run):
    lines = _load().summary(run, "tiny")
    text = "\n".join(lines)
    # the latest entry of each stage: 30 + 500 + 30 seconds
    assert "Stage time: 3 stages, 9.3 min; peak RSS 4,200 MB (base_model); over 4096 MB: base_model" in text
    assert "C-MAS + RL (Teacher) - C-MAS base: +9.87 [1.23, 4.56]  (paper +10.98)" in text
    record = json.loads((run / "reports" / "tiny" / "draw.json").read_text())
    gap = record["comparisons"]["multiagent_opd-ablation_no_searcher_supervision"]
    assert (f"MultiAgent-OPD - ablation: no Searcher supervision: {gap['diff']:+.2f} [{gap['low']:.2f}, "
            f"{gap['high']:.2f}]  (paper +8.86)") in text
    metrics = json.loads((run / "reports" / "metrics.json").read_text())
    forced = metrics["systems"]["h_mas_base"]["behaviour"]["forced_answer_share"]
    assert f"H-MAS base {forced:.2f}" in text
    kl = pd.read_csv(run / "reports" / "tiny" / "curves" / "dev_searcher_kl.csv")
    opd = kl[kl.system == "multiagent_opd"].sort_values("step").dev_searcher_kl
    nosup = kl[kl.system == "ablation_no_searcher_supervision"].sort_values("step").dev_searcher_kl
    assert lines[-1].startswith("  | 9.3 | 4,200 MB | +9.87 [1.23, 4.56] | ")
    assert lines[-1].endswith(f"| {opd.iloc[0]:.4f} -> {opd.iloc[-1]:.4f} ({nosup.iloc[-1]:.4f}) |")
    tied = pd.read_csv(run / "reports" / "tiny" / "curves" / "tied_groups_leader.csv")
    leader = tied[tied.system == "multiagent_opd"].tied_groups_leader.mean()
    assert f"MultiAgent-OPD {leader:.2f} / " in next(line for line in lines if line.startswith("  leader:"))


def test_a_clone_without_timings_is_still_summarised(run):
    (run / "data" / "timings.jsonl").unlink()
    lines = _load().summary(run, "tiny")
    assert "Stage time: no data/timings.jsonl here (make repro writes it)" in lines
    assert lines[-1].startswith("  | - | - | +9.87")


def test_bad_files_are_named_with_the_line_and_what_was_expected(run):
    summary = _load().summary
    with (run / "data" / "timings.jsonl").open("a") as f:
        f.write('{"stage": "index"}\n')
    with pytest.raises(InputError, match=r"timings.jsonl, line 5: expected a JSON object with stage, seconds"):
        summary(run, "tiny")
    (run / "data" / "timings.jsonl").unlink()
    path = run / "reports" / "tiny" / "draw.json"
    record = json.loads(path.read_text())
    record["comparisons"][STAGE_ONE]["low"] = "n/a"
    path.write_text(json.dumps(record))
    with pytest.raises(InputError, match=rf"draw.json: field 'comparisons.{STAGE_ONE}.low': expected a number"):
        summary(run, "tiny")
    record["comparisons"][STAGE_ONE].update(diff=None, low=None, high=None)  # a pair the report could not measure
    path.write_text(json.dumps(record))
    assert summary(run, "tiny")[-1].startswith("  | - | - | - | ")
    (run / "reports" / "metrics.json").write_text("{")
    with pytest.raises(InputError, match=r"metrics.json, line 1: not valid JSON"):
        summary(run, "tiny")


def test_where_the_points_go_is_read_from_the_draw_record():
    module = _load()
    assert module.role_lines({}, {"funnel": None})[0].endswith("not measured (the evaluation records predate "
                                                               "the funnel)")
    record = {"funnel": {
        "rates": {"multiagent_opd": {"searcher_fidelity": 56.04, "searches_per_searcher_call": 1.234,
                                     "answerer_accuracy_given_handed": None},
                  "c_mas_base": {"searcher_fidelity": 50.26, "searches_per_searcher_call": 1.0,
                                 "answerer_accuracy_given_handed": 41.0}},
        "comparisons": {"multiagent_opd-h_mas_base": {
            "searcher_fidelity": {"diff": 2.7149, "low": 0.5, "high": 4.9},
            "answerer_accuracy_given_handed": None}}}}
    lines = module.role_lines({}, record)
    assert lines[1] == "  C-MAS base: 50.3 / 1.00 / 41.0"  # registry order, not the record's
    assert lines[2] == "  MultiAgent-OPD: 56.0 / 1.23 / -"
    assert lines[4] == "  MultiAgent-OPD - H-MAS base: +2.71 [0.50, 4.90]; not measured"
