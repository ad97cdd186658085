"""The whole paper on the `ci` profile: `dvc repro` from a fresh copy builds every stage,
ends with the report, and a second `dvc repro` does nothing. Each stage records what it read
(pipeline.cli's $MAOPD_STAGE_READS): its params must be exactly dvc.yaml's params of the stage, and
every project module it loaded must be among its deps."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest
import yaml

from pipeline.checkout_copy import copy_checkout
from pipeline.cli import STAGE_READS_ENV
from pipeline.systems import SYSTEMS
from tests.test_dvc_dag import covered, load_dvc_yaml, stage_bodies

# Keys no stage computes with: what MLflow stores beside the run (docs/design.md)
NOT_DEPENDENCIES = ("ci.tracking",)
# Keys a stage reads in another profile only
OTHER_PROFILES = {"corpus": {"ci.data.raw_dir"}}  # the raw files' folder, read when data.source is raw (paper)

pytestmark = pytest.mark.slow


def _dvc(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1",
           STAGE_READS_ENV: str(cwd / "reads")}
    env.pop("MLFLOW_TRACKING_URI", None)
    return subprocess.run([str(bin_dir / "dvc"), *args], cwd=cwd, env=env, capture_output=True, text=True)


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    work = copy_checkout(tmp_path_factory.mktemp("e2e") / "repo", profile="ci")
    proc = _dvc(["repro"], work)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]
    return work


def test_every_system_is_evaluated_four_times_per_question(built):
    test = pd.read_parquet(built / "data" / "splits" / "test.parquet")
    for system in SYSTEMS:
        records = pd.read_parquet(built / "data" / "eval" / system.name / "records.parquet")
        assert len(records) == 4 * len(test), system.name
        assert not records.duplicated(["question_id", "run"]).any()


def test_report_and_metrics_are_written(built):
    assert (built / "reports" / "ci" / "paper.md").read_text().count("|") > 20
    assert (built / "reports" / "ci" / "paper.html").exists()
    assert (built / "reports" / "ci" / "main_table.tex").exists()
    metrics = json.loads((built / "reports" / "metrics.json").read_text())
    assert set(metrics["systems"]) == {s.name for s in SYSTEMS}


def test_the_reports_funnel_agrees_with_an_independent_recount(built):
    """Where the points go: every record's funnel and every figure the report prints, recounted
    from the records' raw columns, the split's hops and the passages (scripts/recount_funnel.py)."""
    paper = (built / "reports" / "ci" / "paper.md").read_text()
    assert "## Where the points go" in paper and "**Facts read**" in paper
    proc = subprocess.run([sys.executable, "scripts/recount_funnel.py", "--root", ".", "--profile", "ci"],
                          cwd=built, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = [line for line in proc.stdout.splitlines() if " records, 0 whose funnel columns differ" in line]
    assert len(lines) == len(SYSTEMS), proc.stdout
    assert all("on the stating passage" in line for line in lines), proc.stdout


def test_training_audits_exist_for_every_trained_system(built):
    audits = {p.name for p in (built / "data" / "audit").iterdir()}
    assert "base" in audits
    assert len(audits) >= 7


def test_dvc_metrics_show_prints_one_row_per_system(built):
    proc = _dvc(["metrics", "show", "--json"], built)
    assert proc.returncode == 0, proc.stderr
    files = json.loads(proc.stdout)[""]["data"]
    assert set(files) == {f"reports/ci/metrics/{s.name}.json" for s in SYSTEMS}
    assert all("avg@4" in entry["data"] for entry in files.values())


def test_dvc_plots_show_draws_every_plot_dvc_yaml_names(built):
    proc = _dvc(["plots", "show", "--json"], built)
    assert proc.returncode == 0, proc.stderr
    shown = json.loads(proc.stdout)
    assert "errors" not in shown, shown.get("errors")
    plots = shown["data"]
    assert set(plots) == {next(iter(p)).replace("${profile}", "ci") for p in load_dvc_yaml(built / "dvc.yaml")["plots"]}
    for name in ("reports/ci/curves/dev_em.csv", "reports/ci/plots/macro.csv", "reports/ci/plots/gaps.csv"):
        assert plots[name][0]["content"]["data"]["values"], f"{name}: no data"
    for name, renders in plots.items():  # a plot without data is a metric no system logged: its header alone
        if not renders or not renders[0]["content"]["data"]["values"]:
            assert len((built / name).read_text().splitlines()) == 1, name


def test_every_stage_has_an_mlflow_run_of_its_state_and_the_report_links_the_recorded_runs(built):
    """`make repro`'s second step: every stage of dvc.lock has a run tagged with its state, the
    runs this repro made tagged `ran`, each the run its stage recorded in data/runs/; the report
    links every stage but itself by that run's id."""
    import re

    from mlflow.tracking import MlflowClient

    from pipeline.record_runs import OUTCOME_TAG, STATE_TAG, dvc_state, lock_entries
    from pipeline.tracking.links import run_link
    from pipeline.tracking.stage_record import read_record

    env = {**os.environ, "DVC_NO_ANALYTICS": "1"}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.run([sys.executable, "-m", "pipeline", "record-runs", "--since", "0"], cwd=built, env=env,
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    client = MlflowClient(f"sqlite:///{built / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("multiagent-opd-ci").experiment_id
    paper = (built / "reports" / "ci" / "paper.md").read_text()
    linked = set()
    for stage, entry in lock_entries(built).items():
        runs = client.search_runs([experiment], f"tags.stage = '{stage}' and tags.{STATE_TAG} = '{dvc_state(entry)}'")
        assert runs and runs[0].info.run_name == stage, stage
        assert runs[0].data.tags[OUTCOME_TAG] == "ran", stage  # every stage ran in this fresh copy
        record = read_record(built, stage)
        assert record is not None and record.run_id == runs[0].info.run_id, stage  # the run that made the state
        if stage != "report":  # the report's record is written once its run ends, after paper.md
            assert f"| [`{stage}`]({run_link(record.run_id)}) |" in paper, stage
            linked.add(record.run_id)
    assert "| `report` |" in paper and "/maopd/runs/" not in paper
    run_ids = set(re.findall(r"(?<![0-9a-f])[0-9a-f]{32}(?![0-9a-f])", paper))
    assert run_ids == linked  # no other run named, the report's own included


def test_every_stage_writes_its_record_and_every_training_stage_its_curves(built):
    """After the repro, data/runs/ holds the record of every stage of dvc.yaml, naming a FINISHED
    run of the store with that stage's name; each trained system's data/curves/<system>.csv holds,
    row for row, the metric history its training run logged for the curve metrics."""
    from mlflow.tracking import MlflowClient

    from pipeline.dag import stage_names
    from pipeline.report.curves import CURVE_METRICS, STAGE_COLUMNS, stage_curves_path
    from pipeline.systems import TRAINED
    from pipeline.tracking.stage_record import read_record, record_path

    client = MlflowClient(f"sqlite:///{built / 'mlflow.db'}")
    for stage in stage_names():
        assert record_path(built, stage).is_file(), stage
        record = read_record(built, stage)
        assert (record.stage, record.profile, record.experiment) == (stage, "ci", "multiagent-opd-ci")
        run = client.get_run(record.run_id)
        assert run.info.status == "FINISHED" and run.info.run_name == stage, stage
        assert run.data.tags["stage"] == stage and run.info.experiment_id == record.experiment_id, stage

    order = {m.key: i for i, m in enumerate(CURVE_METRICS)}
    for system in TRAINED:
        path = stage_curves_path(built, system.name)
        assert path.is_file(), system.name
        frame = pd.read_csv(path)
        assert tuple(frame.columns) == STAGE_COLUMNS, system.name
        run_id = read_record(built, system.train_stage).run_id
        logged = sorted(((m.step, key, m.value) for key in order for m in client.get_metric_history(run_id, key)),
                        key=lambda row: (row[0], order[row[1]]))
        rows = list(frame[["step", "metric", "value"]].itertuples(index=False, name=None))
        assert rows == logged, system.name
        assert "dev_em" in set(frame["metric"]), system.name  # every trained system has a dev curve


def test_second_repro_does_nothing(built):
    proc = _dvc(["repro"], built)
    assert proc.returncode == 0, proc.stderr
    assert "Running stage" not in proc.stdout


def test_make_repro_answers_a_no_op_from_its_stamp(built):
    """The stamp over the real DAG: current right after it is recorded, stale once a file DVC
    checks is touched, and current again after the `dvc repro` that finds nothing to do."""
    from pipeline import uptodate

    uptodate.record(built)
    assert uptodate.check(built).current, uptodate.check(built).reason
    watched = json.loads((built / uptodate.STAMP).read_text())["files"]
    assert {"dvc.lock", "params.yaml", "pipeline/cli.py", "data/eval/multiagent_opd/records.parquet"} <= set(watched)
    os.utime(built / "pipeline" / "rl" / "trainer.py")
    verdict = uptodate.check(built)
    assert not verdict.current and "pipeline/rl/trainer.py" in verdict.reason
    assert "Running stage" not in _dvc(["repro"], built).stdout
    uptodate.record(built)
    assert uptodate.check(built).current


def _leaves(tree, prefix: str = "") -> set[str]:
    if isinstance(tree, dict) and tree:
        return set().union(*(_leaves(v, f"{prefix}.{k}".lstrip(".")) for k, v in tree.items()))
    return {prefix}


def _under(keys, leaves: set[str]) -> set[str]:
    """The leaves of params.yaml that the keys name (a key names itself or a section)."""
    return {leaf for leaf in leaves for key in keys if leaf == key or leaf.startswith(key + ".")}


def test_every_stage_declares_exactly_the_params_it_read(built):
    raw = yaml.safe_load((built / "params.yaml").read_text())
    leaves = {x for x in _leaves(raw) if x.split(".")[0] in ("profile", "common", "ci")}
    wrong = {}
    for name, body in stage_bodies(load_dvc_yaml(built / "dvc.yaml")).items():
        read = json.loads((built / "reads" / f"{name}.json").read_text())["params"]
        declared = _under([p.replace("${profile}", "ci") for p in body["params"]], leaves)
        used = _under(read, leaves) - _under(NOT_DEPENDENCIES, leaves) | OTHER_PROFILES.get(name, set())
        if declared != used:
            wrong[name] = {"read, not declared": sorted(used - declared),
                           "declared, never read": sorted(declared - used)}
    assert wrong == {}


def test_every_module_a_stage_loaded_is_among_its_deps(built):
    for name, body in stage_bodies(load_dvc_yaml(built / "dvc.yaml")).items():
        modules = json.loads((built / "reads" / f"{name}.json").read_text())["modules"]
        missing = [m for m in modules if not covered(Path(m), body["deps"])]
        assert missing == [], name
