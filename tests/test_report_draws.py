"""Draws in the report: this run's draw record (reports/<profile>/draw.json), the kept draws it
reads (reports/<profile>/draws/*.json), the "Across draws" section, the forest plot, and the
dedup counts of the splits. Synthetic records, no MLflow run, no stage."""

from __future__ import annotations

import copy
import json
import os
import statistics

import pandas as pd
import pytest

from pipeline.draws.record import check_record, comparison_key, draw_record
from pipeline.errors import InputError
from pipeline.eval.bootstrap import paired_bootstrap_many
from pipeline.eval.metrics import behaviour, macro_metrics
from pipeline.eval.records import per_question_scores
from pipeline.eval.synthetic import synthetic_records
from pipeline.report import across_draws as ad
from pipeline.report import comparisons as cmp
from pipeline.report import figures
from pipeline.report.curves import Curve
from pipeline.report.inputs import dedup_counts
from pipeline.report.results import compute_results
from pipeline.report.scale import scale_section
from pipeline.systems import SYSTEMS

QUOTAS = {"nq": 16, "hotpotqa": 10, "bamboogle": 6}
QUESTIONS = sum(QUOTAS.values())
DRAWS, SEED, LEVEL = 300, 11, 0.95
IDENTITY = {"seed_set": "G", "cpu": "Test CPU, family 6 model 1 (AVX2)", "precision": "float32"}
DEDUP = {"test_equals_train": 105, "duplicate_in_split": 101}


def _hashes(models: str) -> dict[str, dict[str, str]]:
    """The content hashes a record names: the models (the same `models` text, the same models) and
    the evaluation records."""
    return {"models": {w: f"{models}:{w}".encode().hex() for w in ("base", "c_mas_rl", "multiagent_opd")},
            "records": {"c_mas_base": "r" * 64}}


HASHES = _hashes("this run")
KL = {"multiagent_opd": ([0, 8, 16], [0.0100, 0.0060, 0.0040]),
      "ablation_no_searcher_supervision": ([0, 16], [0.0100, 0.0120])}


def _curves() -> dict[str, Curve]:
    return {s: Curve(s, f"run-{s}", pd.DataFrame({"step": steps, "dev_searcher_kl": values}),
                     {"dev_searcher_kl": 16}) for s, (steps, values) in KL.items()}


@pytest.fixture(scope="module")
def run():
    """Records of every system but one ablation, the results and gaps the report computes, and
    this run's draw record."""
    systems = [s.name for s in SYSTEMS if s.name != "ablation_base_teacher"]
    records = pd.concat([synthetic_records(s, 0.2 + 0.05 * i, QUOTAS, seed=i) for i, s in enumerate(systems)],
                        ignore_index=True)
    results = compute_results(records, systems, ["ablation_base_teacher"], "multiagent_opd", 4, DRAWS, SEED, LEVEL)
    gaps = cmp.measure_gaps(records, systems, 4, DRAWS, SEED, LEVEL)
    record = draw_record(profile="ci", identity=IDENTITY, test_questions=QUESTIONS, level=95, results=results,
                         gaps=gaps, kl_ends=cmp.searcher_kl_ends(_curves()), dedup=DEDUP, hashes=HASHES)
    return records, record


def test_the_draw_record_holds_this_runs_numbers(run, tmp_path):
    records, record = run
    assert {k: record[k] for k in ("schema", "profile", "seed_set", "cpu", "precision", "test_questions", "runs",
                                   "level")} == {"schema": 1, "profile": "ci", "seed_set": "G", "cpu": IDENTITY["cpu"],
                                                 "precision": "float32", "test_questions": QUESTIONS, "runs": 4,
                                                 "level": 95}
    assert record["hashes"] == HASHES
    macro = macro_metrics(records, runs=4).set_index("system")["avg@4"]
    assert record["systems"] == {s: pytest.approx(v, abs=1e-4) for s, v in macro.items()}
    forced = behaviour(records, runs=4).set_index("system")["forced_answer_share"]
    assert record["forced_answer_share"] == {s: pytest.approx(v, abs=1e-4) for s, v in forced.items()}

    # the paper's seven comparisons, in the report's order, each the paired bootstrap of pipeline.eval
    assert list(record["comparisons"]) == [comparison_key(t, b) for t, b, _ in cmp.PAIRS]
    assert len(record["comparisons"]) == 7 and "multiagent_opd-h_mas_base" in record["comparisons"]
    stage_one = record["comparisons"]["c_mas_rl-c_mas_base"]
    subset = records[records["system"].isin(["c_mas_rl", "c_mas_base"])]
    expected = paired_bootstrap_many(per_question_scores(subset, runs=4), "c_mas_rl", ["c_mas_base"], draws=DRAWS,
                                     seed=SEED, level=LEVEL).iloc[0]
    for key in ("diff", "low", "high"):
        assert stage_one[key] == pytest.approx(expected[key], abs=1e-4)
    assert stage_one["published"] == pytest.approx(36.07 - 25.09) and stage_one["target"] == "c_mas_rl"
    assert record["comparisons"]["multiagent_opd-prompted_critic"]["published"] == 4.06  # the paper's own interval
    unmeasured = record["comparisons"]["multiagent_opd-ablation_base_teacher"]  # no records of the ablation
    assert (unmeasured["diff"], unmeasured["low"], unmeasured["high"]) == (None, None, None)

    assert record["dev_searcher_kl"] == {"multiagent_opd": {"first": 0.01, "last": 0.004},
                                         "ablation_no_searcher_supervision": {"first": 0.01, "last": 0.012}}
    assert record["dedup"] == DEDUP
    text = json.dumps(record)
    assert len(text) < 4000  # a few KB
    check_record(json.loads(text), tmp_path / "draw.json", "ci")  # what the report writes, it reads back


def test_the_dedup_counts_come_from_the_splits_report(tmp_path):
    assert dedup_counts(tmp_path) is None
    path = tmp_path / "data" / "splits" / "dedup_report.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"removed": {"empty": 0, "duplicate_in_split": 7, "test_equals_train": 3}}))
    assert dedup_counts(tmp_path) == {"test_equals_train": 3, "duplicate_in_split": 7}
    path.write_text(json.dumps({"removed": {"duplicate_in_split": 7, "test_equals_train": "3"}}))
    with pytest.raises(InputError, match=r"dedup_report\.json: field 'removed\.test_equals_train'"):
        dedup_counts(tmp_path)
    text = scale_section(None, "ci", "m", 95, "multiagent_opd", {"test_equals_train": 1105, "duplicate_in_split": 7})
    assert ("1,105 test-pool questions were removed because their normalised text equals a training question's, "
            "and 7 questions as duplicates") in text


def _kept(record: dict, name: str, shift: float, models: str | None = None, **extra) -> dict:
    """A kept draw: `record` with every gap moved by `shift`, the draw command's keys, and the
    hashes of the models `models` (by default other models than this run's, named after the draw)."""
    out = copy.deepcopy(record)
    for entry in out["comparisons"].values():
        if entry["diff"] is not None:
            for key in ("diff", "low", "high"):
                entry[key] = entry[key] + shift
    out["systems"] = {s: v + shift for s, v in out["systems"].items()}
    out.update({"name": name, "commit": "89abcdef" * 5, "date": "2026-12-05", "stage_minutes": 301.4,
                "peak_rss_mb": 4100, "hashes": _hashes(models or name), **extra})
    return out


def _write(folder, name: str, data) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.json").write_text(json.dumps(data) if not isinstance(data, str) else data)


def test_kept_draws_are_read_and_this_run_is_listed_once(run, tmp_path):
    _, record = run
    folder = tmp_path / "draws"
    assert ad.load_draws(folder, "ci") == []  # no folder (a copy without reports/): no kept draw
    _write(folder, "b-other", _kept(record, "G-zen4-float32", 1.0, stage_minutes=None, extra_key=[1, 2]))
    kept = ad.load_draws(folder, "ci")
    rows = ad.draw_rows(kept, record, "0123456789abcdef0123456789abcdef01234567-dirty")
    assert [(r.label, r.this_run) for r in rows] == [("G-zen4-float32", False), ("this run", True)]
    assert rows[1].record["commit"].endswith("-dirty") and ad.short_commit(rows[1].record["commit"]) == "0123456-dirty"

    # kept from the same models, though its numbers differ (re-made elsewhere): this run, no extra row,
    # and its row shows this run's numbers under the kept name
    (folder / "a-this.json").write_text(json.dumps(_kept(record, "A-xeon-bf16", 0.5, models="this run")))
    rows = ad.draw_rows(ad.load_draws(folder, "ci"), record, "0123456")
    assert [(r.label, r.this_run, r.kept) for r in rows] == [("A-xeon-bf16 (this run)", True, True),
                                                             ("G-zen4-float32", False, True)]  # by file name
    joined = rows[0].record
    assert joined["name"] == "A-xeon-bf16" and joined["commit"] == "89abcdef" * 5  # the kept draw's own keys
    for key in ad.MEASURED:
        assert joined[key] == record[key], key
    assert rows[1].record["systems"] != record["systems"]  # another draw keeps its own numbers
    other = copy.deepcopy(record) | {"test_questions": 999}  # this run's numbers, its test set with them
    rows = ad.draw_rows(ad.load_draws(folder, "ci"), other, "0123456")
    assert rows[0].label == "A-xeon-bf16 (this run)" and rows[0].record["test_questions"] == 999
    assert not rows[0].other_test_set and rows[1].other_test_set
    assert rows[1].label == "G-zen4-float32 (different test set: 32 questions)"


def test_equal_scores_alone_do_not_make_a_kept_draw_this_run(run, tmp_path):
    """A kept draw with exactly this run's numbers but other models (or none named: kept before
    the hashes) is another draw; this run gets a row of its own."""
    _, record = run
    folder = tmp_path / "draws"
    _write(folder, "a-twin", _kept(record, "twin", 0.0))  # equal scores, other models
    _write(folder, "b-old", _kept(record, "old", 0.0, hashes=None))  # equal scores, no hashes
    kept = ad.load_draws(folder, "ci")
    assert kept[0][1]["systems"] == record["systems"] == kept[1][1]["systems"]
    rows = ad.draw_rows(kept, record, "0123456")
    assert [(r.label, r.this_run, r.kept) for r in rows] == [("twin", False, True), ("old", False, True),
                                                             ("this run", True, False)]
    assert rows[-1].record["commit"] == "0123456"


def test_two_kept_draws_of_the_same_models_are_refused(run, tmp_path):
    """One set of models is one draw, whatever its numbers: reading two kept records with equal
    model hashes names both files."""
    _, record = run
    folder = tmp_path / "draws"
    _write(folder, "a-first", _kept(record, "first", 0.0, models="shared"))
    _write(folder, "b-second", _kept(record, "second", 1.0, models="shared"))
    with pytest.raises(InputError, match=r"b-second\.json: the same models \(field 'hashes\.models'\).*first"):
        ad.load_draws(folder, "ci")
    _write(folder, "b-second", _kept(record, "second", 1.0, models="other"))  # other models: two draws
    assert [name for name, _ in ad.load_draws(folder, "ci")] == ["first", "second"]


@pytest.mark.parametrize(("change", "field"), [
    (lambda d: d.pop("cpu"), "'cpu' is missing"),
    (lambda d: d.update(schema=2), "'schema': expected 1"),
    (lambda d: d.update(profile="tiny"), "'profile': expected 'ci'"),
    (lambda d: d["systems"].update(c_mas_base="23.8"), "'systems.c_mas_base': expected a number"),
    (lambda d: d["comparisons"]["c_mas_rl-c_mas_base"].update(low="x"),
     "'comparisons.c_mas_rl-c_mas_base.low': expected a number or null"),
    (lambda d: d["comparisons"]["c_mas_rl-c_mas_base"].pop("high"),
     "'comparisons.c_mas_rl-c_mas_base.high' is missing"),
    (lambda d: d["dev_searcher_kl"]["multiagent_opd"].update(last=None), "'dev_searcher_kl.multiagent_opd.last'"),
    (lambda d: d.update(test_questions=5000.5), "'test_questions': expected a whole number"),
    (lambda d: d.update(stage_minutes="long"), "'stage_minutes'"),
    (lambda d: d["hashes"]["models"].update(base=1), "'hashes.models.base': expected a string"),
    (lambda d: d["hashes"].pop("records"), "'hashes.records' is missing"),
])
def test_a_malformed_draw_names_its_file_and_field(run, tmp_path, change, field):
    data = _kept(run[1], "broken", 0.0)
    change(data)
    _write(tmp_path / "draws", "broken", data)
    with pytest.raises(InputError, match=r"draws/broken\.json: field " + field.replace(".", r"\.")
                       .replace("(", r"\(")):
        ad.load_draws(tmp_path / "draws", "ci")


def test_a_draw_file_that_is_not_json_names_the_file(tmp_path):
    _write(tmp_path / "draws", "cut", '{"schema": 1, "seed_')
    with pytest.raises(InputError, match=r"draws/cut\.json, line 1: not valid JSON"):
        ad.load_draws(tmp_path / "draws", "ci")


def _gap_record(record: dict, gap: tuple[float, float, float] | None, models: str | None = None,
                **changes) -> dict:
    """`record` with the gap of C-MAS + RL over C-MAS base set to `gap`; with `models`, the record
    of a draw of those models (other than this run's)."""
    out = copy.deepcopy(record) | changes
    if models is not None:
        out["hashes"] = _hashes(models)
    diff, low, high = gap if gap else (None, None, None)
    out["comparisons"]["c_mas_rl-c_mas_base"].update(diff=diff, low=low, high=high)
    return out


def test_the_section_lists_each_draws_interval_and_counts_those_above_zero(run):
    _, record = run
    key = "c_mas_rl-c_mas_base"
    kept = [("above", _gap_record(record, (2.0, 1.0, 3.0), "above", seed_set="A", cpu="Zen 4", precision="bf16",
                                  commit="a" * 40, systems={"c_mas_base": 1.0}, stage_minutes=301.4,
                                  peak_rss_mb=4100)),
            ("across", _gap_record(record, (0.5, -1.0, 2.0), "across", seed_set="G", systems={"c_mas_base": 2.0},
                                   forced_answer_share={"h_mas_base": 10.0, "multiagent_opd": 14.5})),
            ("below", _gap_record(record, (-2.5, -4.0, -1.0), "below", systems={"c_mas_base": 3.0},
                                  dev_searcher_kl={"multiagent_opd": {"first": 0.01, "last": 0.0085}})),
            ("other-set", _gap_record(record, (4.0, 2.0, 6.0), "other-set", test_questions=5000,
                                      systems={"c_mas_base": 4.0})),
            ("unmeasured", _gap_record(record, None, "unmeasured", systems={"c_mas_base": 5.0}))]
    this_run = _gap_record(record, (1.5, 0.25, 2.75))
    rows = ad.draw_rows(kept, this_run, "b" * 40)
    assert [r.name for r in rows] == ["above", "across", "below", "other-set", "unmeasured", "this run"]
    same_test_set = [2.0, 0.5, -2.5, 1.5]
    assert ad.count_line(rows, key) == ("Interval above 0 in 3 of 5 draws (below 0 in 1, including 0 in 1). "
                                        "On this run's test set: above 0 in 2 of 4. Mean gap over these 4 draws "
                                        f"{statistics.mean(same_test_set):+.2f}, standard deviation between draws "
                                        f"{statistics.stdev(same_test_set):.2f}.")
    assert ad.count_line(rows[-1:], key) == "Interval above 0 in 1 of 1 draws (below 0 in 0, including 0 in 0)."

    md = ad.across_draws_section(rows, "ci", 95, 4, ad.DRAWS_FIGURE)
    table = md.split("**C-MAS + RL (Teacher) - C-MAS base**")[1].split("**MultiAgent-OPD")[0]
    lines = {line.split(" | ")[0].lstrip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert lines["above"] == "| above | A | Zen 4 | bf16 | aaaaaaa | +2.00 [1.00, 3.00] | yes |"
    assert lines["across"].endswith("| +0.50 [-1.00, 2.00] | no |")
    assert lines["below"].endswith("| -2.50 [-4.00, -1.00] | no |")
    assert lines["other-set (different test set: 5000 questions)"].endswith("| +4.00 [2.00, 6.00] | yes |")
    assert lines["unmeasured"].endswith("| not measured | not measured |")
    assert lines["this run"].endswith("| bbbbbbb | +1.50 [0.25, 2.75] | yes |")
    assert "published (Qwen3-4B, paper): +10.98 (difference of macro avg@4)" in table
    assert "Interval above 0 in 3 of 5 draws" in table
    # one line per comparison; the run has no records of the base-Teacher ablation
    assert md.count("Interval above 0 in") == 6 and md.count("Not measured in any draw.") == 1
    assert f"![Across draws: each comparison's gap per draw, with the published value]({ad.DRAWS_FIGURE})" in md

    per_draw = {line.split(" | ")[0].lstrip("| "): line for line in md.split("**Per draw.**")[1].splitlines()
                if line.startswith("| ")}
    assert "| no (largest difference 4.5 points, MultiAgent-OPD; 1 of 5 Stage-II systems) |" in per_draw["across"]
    assert "| 0.0100 → 0.0085 | 15% (below 20%) |" in per_draw["below"]
    assert "| 0.0100 → 0.0040 | 60% (at least 20%) |" in per_draw["above"]
    assert "| 2026" not in per_draw["this run"] and "| 301 | 4,100 |" in per_draw["above"]


def test_forced_answers_within_three_points_of_h_mas_base():
    shares = {"h_mas_base": 10.0, **{s: 10.0 for s in ad.STAGE_TWO}}
    assert ad.forced_check(shares).startswith("yes (largest difference 0.0 points")
    assert ad.forced_check(shares | {"prompted_critic": 13.0}).startswith("yes (largest difference 3.0")
    assert ad.forced_check(shares | {"prompted_critic": 6.9}) == "no (largest difference 3.1 points, Prompted Critic)"
    assert ad.forced_check({"multiagent_opd": 5.0}) == ad.NOT_MEASURED


def test_the_forest_plot_is_written_and_readable(run, tmp_path):
    _, record = run
    rows = ad.draw_rows([("A-xeon-bf16", _kept(record, "A-xeon-bf16", 0.7)),
                         ("old", _kept(record, "old", -0.4, test_questions=1000))], record, "0123456")
    path = tmp_path / "draws_forest.png"
    assert ad.draws_figure(rows, 95, 4, path)
    assert path.read_bytes()[:4] == b"\x89PNG" and path.stat().st_size > 10_000
    labels = [r.label for r in rows]
    pairs = [(comparison_key(t, b), ad.comparison_title(comparison_key(t, b)), "#333333") for t, b, _ in cmp.PAIRS]
    layout = figures.draws_forest(labels, pairs, {k: [r.gap(k) for r in rows] for k, _, _ in pairs},
                                  {k: (1.0, None, None) for k, _, _ in pairs}, [False, True, False], 95, 4,
                                  tmp_path / "again.png")
    assert layout.width_px <= figures.PAGE_WIDTH_PX and layout.min_text_px >= figures.MIN_TEXT_PX
    assert layout.overlaps == []
    nothing = [ad.DrawRow("this run", _gap_record(record, None) | {"comparisons": {}}, True, False, kept=False)]
    assert not ad.draws_figure(nothing, 95, 4, tmp_path / "none.png") and not (tmp_path / "none.png").exists()


MADE = {"seed_set": "B", "cpu": "Recorded CPU, family 6 model 2 (AVX2)", "precision": "bf16"}


def _report_root(root, records, monkeypatch) -> None:
    """A tiny root to build the report in: evaluation records, the splits' dedup report, and the
    stage records of the stages that made them (seed set, CPU kind and precision MADE), but one
    of `index`, which made no number of the draw, under another seed set."""
    from pipeline.paths import eval_dir
    from pipeline.tracking.stage_record import StageRecord, write_record

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root}/mlflow.db")
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", (root / "artifacts").as_uri())
    for name, frame in records.groupby("system"):
        path = eval_dir(root, name) / "records.parquet"
        path.parent.mkdir(parents=True)
        frame.to_parquet(path)
    (root / "data" / "splits").mkdir(parents=True)
    (root / "data" / "splits" / "dedup_report.json").write_text(json.dumps({"removed": DEDUP}))
    for i, stage in enumerate(REPORT_STAGES[:-1]):
        identity = MADE if stage != "index" else {**MADE, "seed_set": "Z"}
        write_record(root, StageRecord(stage=stage, run_id=f"{i + 1:032x}", experiment_id="1",
                                       experiment="multiagent-opd-ci", profile="ci", commit="c" * 40, code="x",
                                       **identity))


REPORT_STAGES = ("index", "base_model", "evaluate@c_mas_base", "evaluate@multiagent_opd", "report")


def test_the_report_writes_the_record_the_section_and_the_plot(run, tmp_path, monkeypatch, repo_root):
    """build_report on a tiny root: draw.json beside paper.md, its identity from the records of
    the stages that made the numbers, the kept draw read, the dedup sentence where the test set is
    described."""
    from pipeline.config import load_params
    from pipeline.report.build import build_report

    records, record = run
    _report_root(tmp_path, records, monkeypatch)
    _write(tmp_path / "reports" / "ci" / "draws", "kept", _kept(record, "kept-G", 1.0, seed_set="G"))
    params = load_params(repo_root / "params.yaml", profile="ci")
    out = build_report(params, tmp_path, REPORT_STAGES)

    folder = tmp_path / "reports" / "ci"
    written = json.loads((folder / "draw.json").read_text())
    assert written["profile"] == "ci" and written["test_questions"] == QUESTIONS and written["dedup"] == DEDUP
    assert {k: written[k] for k in MADE} == MADE  # from the stage records, not the machine that built it
    assert set(written["systems"]) == set(records["system"]) and len(written["comparisons"]) == 7
    assert written["runs"] == params.common.eval.runs and written["level"] == 95
    assert set(written["hashes"]["records"]) == set(records["system"]) and written["hashes"]["models"] == {}
    md = (folder / "paper.md").read_text()
    section = md.split("## Across draws")[1].split("\n## ")[0]
    assert "kept-G" in section and "| this run |" in section and "(figures/draws_forest.png)" in section
    assert (folder / "figures" / "draws_forest.png").is_file() and ad.DRAWS_FIGURE in out.figures
    scale = md.split("## What this scale can show")[1].split("\n## ")[0]
    assert "105 test-pool questions were removed because their normalised text equals a training question's" in scale
    assert "Across draws</h2>" in (folder / "paper.html").read_text()


def test_the_report_takes_the_kept_draw_of_its_own_models_as_this_run(run, tmp_path, monkeypatch, repo_root):
    """A kept draw whose model hashes are those of the models in this checkout is this run, though
    its numbers differ (e.g. re-made on another CPU); a kept draw with this run's numbers but other
    models is not."""
    from pipeline.config import load_params
    from pipeline.eval.run import model_fingerprint
    from pipeline.report.build import build_report

    records, record = run
    _report_root(tmp_path, records, monkeypatch)
    for weights in ("base", "multiagent_opd"):
        folder = tmp_path / "data" / "models" / weights
        folder.mkdir(parents=True)
        (folder / "config.json").write_text(json.dumps({"weights": weights}))
    models = {w: model_fingerprint(tmp_path / "data" / "models" / w) for w in ("base", "multiagent_opd")}
    kept = _kept(record, "kept-same", 2.0)
    kept["hashes"]["models"] = models
    draws = tmp_path / "reports" / "ci" / "draws"
    _write(draws, "a-same", kept)
    twin = _kept(record, "twin-scores", 0.0)
    _write(draws, "b-twin", twin)
    params = load_params(repo_root / "params.yaml", profile="ci")
    build_report(params, tmp_path, REPORT_STAGES)

    folder = tmp_path / "reports" / "ci"
    written = json.loads((folder / "draw.json").read_text())
    assert written["hashes"]["models"] == models and written["systems"] == twin["systems"]
    section = (folder / "paper.md").read_text().split("## Across draws")[1].split("\n## ")[0]
    assert "kept-same (this run)" in section and "| this run |" not in section
    assert "twin-scores (this run)" not in section and "twin-scores" in section
    # the kept row shows this run's gap, not the kept file's (moved by 2.0)
    gap = written["comparisons"]["c_mas_rl-c_mas_base"]
    table = section.split("**C-MAS + RL (Teacher) - C-MAS base**")[1].split("**MultiAgent-OPD")[0]
    row = next(line for line in table.splitlines() if line.startswith("| kept-same (this run) |"))
    assert f"| {gap['diff']:+.2f} [{gap['low']:.2f}, {gap['high']:.2f}] |" in row


def test_a_repository_copy_brings_the_profiles_kept_draws_and_no_other_report(tmp_path, repo_root):
    """DVC refuses to run a stage whose dep is missing: a copy for a profile (end-to-end tests,
    benchmarks, draws) has that profile's reports/<profile>/draws/ folder."""
    from pipeline.checkout_copy import copy_checkout

    dest = copy_checkout(tmp_path / "copy", "ci", repo_root)
    assert (dest / "reports" / "ci" / "draws" / "README.md").is_file()
    assert not (dest / "reports" / "tiny").exists() and not (dest / "reports" / "metrics.json").exists()
    assert os.listdir(dest / "reports") == ["ci"]


def test_a_record_keeps_the_gap_unrounded_so_both_tables_print_the_same_figure():
    from pipeline.draws.record import _num

    tie = -0.8350000000000001  # a gap on a rounding tie: rounding it first would print -0.83
    assert f"{_num(tie):+.2f}" == f"{tie:+.2f}" == "-0.84"
