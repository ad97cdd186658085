"""The `report` stage on synthetic records, the training stage's curves file and stage records,
and a temporary MLflow store that the report must not read."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil

import pandas as pd
import pytest

from pipeline.config import load_params
from pipeline.errors import InputError
from pipeline.eval.bootstrap import paired_bootstrap_many, perfect_repair_gaps
from pipeline.eval.metrics import behaviour, macro_metrics, per_dataset_metrics, workload
from pipeline.eval.records import per_question_scores
from pipeline.eval.synthetic import synthetic_records
from pipeline.paths import eval_dir
from pipeline.report.curves import CURVE_METRICS, stage_curves_path, write_stage_curves
from pipeline.report.paper import _fallback_html
from pipeline.report.tables import _tex
from pipeline.systems import SYSTEMS
from pipeline.tracking.runs import stage_run
from pipeline.tracking.stage_record import read_record, record_path, write_record
from tests.helpers.configs import EVAL

QUOTAS = {"nq": 12, "hotpotqa": 10, "bamboogle": 5}
ACCURACY = {"multiagent_opd": 0.5, "c_mas_rl": 0.4, "h_mas_base": 0.3, "c_mas_base": 0.25}
DEV_EM = [(0, 0.10), (10, 0.20), (20, 0.25)]
DEV_QUESTIONS = 16
TRAIN_STAGE = "train@multiagent_opd"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A tmp MLflow store with the run of `train@multiagent_opd` that made the curves file (its
    stage record and data/curves/multiagent_opd.csv, under `made`), and a newer run of the same
    stage made elsewhere with other curve values, which the report must not show."""
    folder = tmp_path_factory.mktemp("mlflow")
    made, elsewhere = folder / "made", folder / "elsewhere"
    history = [{"step": step, "dev_em": em, "dev_no_search_share": 1 - em, "reward_leader": em}
               for step, em in DEV_EM]
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{folder}/mlflow.db")
        mp.setenv("MLFLOW_ARTIFACT_ROOT", (folder / "artifacts").as_uri())
        with stage_run(TRAIN_STAGE, "ci", tags={"system": "multiagent_opd"}, root=made) as mlf:
            for point in history:
                mlf.log_metrics({k: v for k, v in point.items() if k != "step"}, step=point["step"])
            run_id = mlf.active_run().info.run_id
        write_stage_curves(stage_curves_path(made, "multiagent_opd"), history,
                           {"dev_em": DEV_QUESTIONS, "dev_no_search_share": DEV_QUESTIONS})
        with stage_run(TRAIN_STAGE, "ci", tags={"system": "multiagent_opd"}, root=elsewhere) as mlf:
            for step in (0, 10, 20, 30):  # newer, other values, more steps: read by name it would win
                mlf.log_metrics({"dev_em": 0.99, "dev_no_search_share": 0.01}, step=step)
            newer_run_id = mlf.active_run().info.run_id
        assert read_record(made, TRAIN_STAGE).run_id == run_id
        yield {"run_id": run_id, "newer_run_id": newer_run_id, "made": made, "env": dict(os.environ)}


def _made_by_training(root, store):
    """The outputs of `train@multiagent_opd` the report reads, as DVC would check them out: the
    curves file and the stage's record of its run."""
    for path in (stage_curves_path(store["made"], "multiagent_opd"), record_path(store["made"], TRAIN_STAGE)):
        target = root / path.relative_to(store["made"])
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(path, target)


@pytest.fixture()
def params(repo_root):
    return load_params(repo_root / "params.yaml", profile="ci")


def _write(root, systems):
    frames = {}
    for i, name in enumerate(systems):
        frames[name] = synthetic_records(name, ACCURACY[name], QUOTAS, seed=i)
        path = eval_dir(root, name) / "records.parquet"
        path.parent.mkdir(parents=True)
        frames[name].to_parquet(path)
    return pd.concat(frames.values(), ignore_index=True)


def _report(params, root, store, monkeypatch):
    from pipeline.stages import STAGES

    monkeypatch.setenv("MLFLOW_TRACKING_URI", store["env"]["MLFLOW_TRACKING_URI"])
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", store["env"]["MLFLOW_ARTIFACT_ROOT"])
    _made_by_training(root, store)
    summary = STAGES["report"](params, root)
    metrics = json.loads((root / "reports" / "metrics.json").read_text())
    return summary, metrics, (root / "reports" / "ci" / "paper.md").read_text()


def test_report_writes_every_output_and_numbers_match_pipeline_eval(tmp_path, params, store, monkeypatch):
    from pipeline.dag import stage_names

    records = _write(tmp_path, list(ACCURACY))
    # every other stage but `index` made its outputs in some run of the store; `index` has no record here
    made_by = read_record(store["made"], TRAIN_STAGE)
    run_ids = {TRAIN_STAGE: store["run_id"]}
    for i, stage in enumerate(s for s in stage_names() if s not in ("report", "index", TRAIN_STAGE)):
        run_ids[stage] = f"{i + 1:032x}"
        write_record(tmp_path, dataclasses.replace(made_by, stage=stage, run_id=run_ids[stage]))
    summary, metrics, md = _report(params, tmp_path, store, monkeypatch)
    folder = tmp_path / "reports" / "ci"
    for name in ("paper.html", "main_table.tex", "figures/training_dynamics.png", "figures/macro_avg4.png"):
        assert (folder / name).stat().st_size > 0, name
    assert (folder / "figures/training_dynamics.png").read_bytes()[:4] == b"\x89PNG"

    macro = macro_metrics(records, runs=EVAL.runs).set_index("system")
    per_dataset = per_dataset_metrics(records, runs=EVAL.runs).set_index(["system", "dataset"])
    for name in ACCURACY:
        ours = metrics["systems"][name]
        for key in ("avg@4", "pass@4", "all@4"):
            assert ours["macro"][key] == pytest.approx(macro.loc[name, key], abs=1e-4)
            assert ours["datasets"]["hotpotqa"][key] == pytest.approx(per_dataset.loc[(name, "hotpotqa"), key],
                                                                      abs=1e-4)
    assert metrics["systems"]["c_mas_rl"]["workload"]["input_tokens"] == pytest.approx(
        workload(records).set_index("system").loc["c_mas_rl", "input_tokens"], abs=1e-4)
    assert metrics["systems"]["h_mas_base"]["behaviour"]["format_failure_rate_macro"] == pytest.approx(
        behaviour(records, runs=EVAL.runs).set_index("system").loc["h_mas_base", "format_failure_rate_macro"], abs=1e-4)

    ev = params.common.eval
    gaps = paired_bootstrap_many(per_question_scores(records, runs=ev.runs), "multiagent_opd",
                                 ["c_mas_base", "c_mas_rl", "h_mas_base"], draws=ev.bootstrap_draws,
                                 seed=ev.bootstrap_seed, level=ev.confidence).set_index("baseline")
    repair = perfect_repair_gaps(records, "multiagent_opd", ["c_mas_base", "c_mas_rl", "h_mas_base"],
                                 runs=ev.runs, draws=ev.bootstrap_draws, seed=ev.bootstrap_seed,
                                 level=ev.confidence).set_index("baseline")
    assert set(metrics["gaps"]) == {"vs_c_mas_base", "vs_c_mas_rl", "vs_h_mas_base"}
    for key in ("diff", "low", "high"):
        assert metrics["gaps"]["vs_c_mas_rl"][key] == pytest.approx(gaps.loc["c_mas_rl", key], abs=1e-4)
        assert metrics["perfect_repair"]["vs_h_mas_base"][key] == pytest.approx(repair.loc["h_mas_base", key], abs=1e-4)
    assert metrics["systems_evaluated"] == 4 and "prompted_critic" in metrics["systems_missing"]

    curve = pd.read_csv(folder / "curves" / "dev_em.csv")  # one file per metric, long format for dvc plots
    assert curve.columns.tolist() == ["step", "system", "questions", "dev_em"]
    assert list(zip(curve["step"], curve["dev_em"])) == DEV_EM
    assert set(curve["system"]) == {"multiagent_opd"} and set(curve["questions"]) == {DEV_QUESTIONS}
    assert sorted(p.name for p in (folder / "curves").iterdir()) == sorted(f"{m.key}.csv" for m in CURVE_METRICS)
    empty = {p.name for p in (folder / "curves").iterdir() if len(p.read_text().splitlines()) == 1}
    assert empty == {f"{m.key}.csv" for m in CURVE_METRICS} - {"dev_em.csv", "dev_no_search_share.csv"}
    assert summary["curves"] == ["multiagent_opd"]

    headline = json.loads((folder / "metrics" / "c_mas_rl.json").read_text())  # one row of `dvc metrics show`
    assert headline["avg@4"] == pytest.approx(macro.loc["c_mas_rl", "avg@4"], abs=0.01)
    assert headline["avg@4_low"] < headline["avg@4"] < headline["avg@4_high"]
    assert headline["gap"] == pytest.approx(gaps.loc["c_mas_rl", "diff"], abs=0.01)
    assert "gap" not in json.loads((folder / "metrics" / "multiagent_opd.json").read_text())
    plots = pd.read_csv(folder / "plots" / "macro.csv")
    assert plots.columns.tolist()[-1] == "value" and len(plots) == 3 * len(ACCURACY)
    assert len(pd.read_csv(folder / "plots" / "gaps.csv")) == 3

    assert "## What this scale can show" in md and "test questions per system" in md
    assert "[splits](data_docs/splits/index.html), [masks](data_docs/masks/index.html)" in md
    # each stage linked to the run its record names (not "the newest run of this name"); no link for
    # the report's own run, nor for a stage without a record
    for stage, run_id in run_ids.items():
        assert f"| [`{stage}`](http://127.0.0.1:5000/maopd/run/{run_id}) |" in md, stage
    assert "| `report` |" in md
    index_row = next(line for line in md.splitlines() if line.startswith("| `index` |"))
    assert "no record of its run" in index_row
    assert "(http://127.0.0.1:5000/maopd/experiments/multiagent-opd-ci)" in md
    assert "/maopd/runs/" not in md and "#/experiments/" not in md
    assert set(re.findall(r"[0-9a-f]{32}", md)) == set(run_ids.values())
    assert summary["stage_records"] == len(run_ids)
    # the newer run of the same stage, with other curve values, changes nothing in the report
    html_text = (folder / "paper.html").read_text()
    assert store["newer_run_id"] not in md and store["newer_run_id"] not in html_text
    assert 0.99 not in set(curve["dev_em"]) and curve["step"].max() == DEV_EM[-1][0]
    runs_row = next(line for line in md.splitlines() if line.startswith("| [`train@multiagent_opd`]"))
    assert "MultiAgent-OPD: the model, and the training curves drawn above" in runs_row  # whose curves it drew

    assert "published (Qwen3-4B, paper)" in md and "ours (ci)" in md and "not evaluated" in md
    opd_row = next(line for line in md.splitlines() if line.startswith("| MultiAgent-OPD |"))
    assert f"{macro.loc['multiagent_opd', 'avg@4']:.2f}" in opd_row and "38.68" in opd_row
    html = (folder / "paper.html").read_text()
    # macro with intervals, gaps, training curves, the forest plot across draws (this run alone), each a
    # file beside the page, which links them (small in git); the MLflow copy embeds them
    assert "<table>" in html and "data:image" not in html and html.count('src="figures/') == 4
    assert all((folder / src).is_file() for src in re.findall(r'src="(figures/[^"]+)"', html))
    tex = (folder / "main_table.tex").read_text()
    assert r"\begin{tabular}" in tex and "C-MAS + RL" in tex and "38.68" in tex


def test_only_base_systems_omit_gaps_with_a_note(tmp_path, params, store, monkeypatch):
    _write(tmp_path, ["c_mas_base", "h_mas_base"])
    summary, metrics, md = _report(params, tmp_path, store, monkeypatch)
    assert metrics["gaps"] == {} and metrics["perfect_repair"] == {}
    assert set(metrics["systems"]) == {"c_mas_base", "h_mas_base"}
    assert "Paired gaps and perfect-repair bounds are omitted" in md
    assert summary["missing"] == [s.name for s in SYSTEMS if s.name not in ("c_mas_base", "h_mas_base")]


def test_no_records_at_all_still_writes_a_report(tmp_path, params, store, monkeypatch):
    _, metrics, md = _report(params, tmp_path, store, monkeypatch)
    assert metrics["systems"] == {} and metrics["systems_evaluated"] == 0
    assert "No system has evaluation records yet." in md


def test_records_lacking_a_column_raise_input_error_naming_the_file(tmp_path, params, store, monkeypatch):
    _write(tmp_path, ["c_mas_base"])
    path = eval_dir(tmp_path, "c_mas_base") / "records.parquet"
    pd.read_parquet(path).drop(columns="format_failure").to_parquet(path)
    with pytest.raises(InputError, match="c_mas_base/records.parquet.*format_failure"):
        _report(params, tmp_path, store, monkeypatch)


def test_latex_escaping_and_fallback_html():
    assert _tex("a_b & 5%") == r"a\_b \& 5\%"
    html = _fallback_html("# T\n\n| a | b |\n|---|---|\n| 1 | **2** |\n\n- item `x`")
    assert "<h1>T</h1>" in html and "<td>1</td><td><strong>2</strong></td>" in html
    assert "<li>item <code>x</code></li>" in html
