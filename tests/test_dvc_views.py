"""What `dvc plots show` and `dvc metrics show` print for a built report: every plot
declared in dvc.yaml has data, the plots page opens offline, and the metrics table has one
readable row per system."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.checkout_copy import copy_checkout
from pipeline.config import load_params
from pipeline.eval.synthetic import synthetic_records
from pipeline.paths import eval_dir
from pipeline.report.curves import CURVE_METRICS, stage_curves_path, write_stage_curves
from pipeline.report.offline_plots import write_template
from pipeline.systems import SYSTEMS
from pipeline.tracking.runs import stage_run

QUOTAS = {"nq": 8, "bamboogle": 4}


def _dvc(args: list[str], cwd: Path) -> str:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    proc = subprocess.run([str(bin_dir / "dvc"), *args], cwd=cwd, env=env, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "failed to load" not in proc.stderr.lower(), proc.stderr
    return proc.stdout


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A copy of the repository (ci profile) whose report stage ran on synthetic records and two
    trained systems' curves files (the training stages' outputs) and records."""
    from pipeline.stages.report import run_report

    repo = copy_checkout(tmp_path_factory.mktemp("views") / "repo", profile="ci")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{repo}/mlflow.db")
        mp.setenv("MLFLOW_ARTIFACT_ROOT", (repo / "mlartifacts").as_uri())
        for stage, system in (("train@multiagent_opd", "multiagent_opd"), ("train@c_mas_rl", "c_mas_rl")):
            with stage_run(stage, "ci", tags={"system": system}, root=repo):  # writes the stage's record
                history = [{"step": step, **{m.key: 0.1 + step / 100 for m in CURVE_METRICS}} for step in (0, 3, 6)]
                write_stage_curves(stage_curves_path(repo, system), history, {m.key: 8 for m in CURVE_METRICS})
        for i, s in enumerate(SYSTEMS):
            path = eval_dir(repo, s.name) / "records.parquet"
            path.parent.mkdir(parents=True)
            synthetic_records(s.name, 0.3, QUOTAS, seed=i).to_parquet(path)
        run_report(load_params(repo / "params.yaml"), repo)
    return repo


def test_every_plot_has_data(built):
    shown = json.loads(_dvc(["plots", "show", "--json"], built))
    assert "errors" not in shown, shown.get("errors")
    plots = shown["data"]
    expected = {f"reports/ci/curves/{m.key}.csv" for m in CURVE_METRICS} | {"reports/ci/plots/macro.csv",
                                                                             "reports/ci/plots/gaps.csv"}
    assert set(plots) == expected
    for name, renders in plots.items():
        (render,) = renders
        values = render["content"]["data"]["values"]
        assert values, f"{name}: no data"
        y = "value" if "/plots/" in name else name.rsplit("/", 1)[1].removesuffix(".csv")
        assert all(v[y] not in ("", None) for v in values), name
    curve = plots["reports/ci/curves/dev_em.csv"][0]["content"]["data"]["values"]
    assert {v["system"] for v in curve} == {"multiagent_opd", "c_mas_rl"}  # one line per system


def test_the_plots_page_loads_nothing_from_the_network(built, tmp_path):
    write_template(built)
    _dvc(["plots", "show", "-o", str(tmp_path / "page")], built)
    page = (tmp_path / "page" / "index.html").read_text()
    assert "cdn.jsdelivr" not in page and "<script src=" not in page
    assert "vegaEmbed" in page and page.count("<div id") >= 4


def test_metrics_show_prints_one_row_per_system(built):
    shown = json.loads(_dvc(["metrics", "show", "--json"], built))
    files = shown[""]["data"]
    assert set(files) == {f"reports/ci/metrics/{s.name}.json" for s in SYSTEMS}
    for name, entry in files.items():
        row = entry["data"]
        assert {"avg@4", "avg@4_low", "avg@4_high", "pass@4", "all@4"} <= set(row) and len(row) <= 8, name
    table = _dvc(["metrics", "show"], built)
    assert max(len(line) for line in table.splitlines()) < 200  # a table a person can read


def test_each_plot_says_what_it_shows_and_colours_systems_by_the_registry(built):
    plots = json.loads(_dvc(["plots", "show", "--json"], built))["data"]
    colours = {s.name: s.colour for s in SYSTEMS}
    x_labels = {}
    for name, (render,) in plots.items():
        spec = render["content"]
        title = spec["title"] if isinstance(spec["title"], str) else spec["title"]["text"]
        assert title and ".csv" not in title and "/" not in title, (name, title)  # not the file's path
        inner = spec.get("spec", spec)
        scale = inner["encoding"]["color"]["scale"]
        assert dict(zip(scale["domain"], scale["range"])) == colours, name  # fixed: same colour in every plot
        x = inner["layer"][0]["encoding"]["x"] if "layer" in inner else inner["encoding"]["x"]
        x_labels[name] = x["title"]
    curve = {m.key: m for m in CURVE_METRICS}["dev_em"]
    assert plots["reports/ci/curves/dev_em.csv"][0]["content"]["title"].startswith(curve.title)
    assert x_labels["reports/ci/plots/macro.csv"] != x_labels["reports/ci/plots/gaps.csv"]  # percent vs points
    assert "percentage points" in x_labels["reports/ci/plots/gaps.csv"]
