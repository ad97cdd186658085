"""Every stage has an MLflow run of the state dvc.lock holds for it, whether or not DVC ran it
(pipeline/record_runs.py): a run begun during the `dvc repro` is tagged with the state, a
stage DVC skipped or restored gets a run of its own that says so, and a second call adds nothing."""

from __future__ import annotations

import time

import pytest
import yaml

from pipeline.config import load_params
from pipeline.record_runs import OUTCOME_TAG, STATE_TAG, dvc_state, record_runs
from pipeline.tracking.runs import experiment_name, stage_run

from .conftest import REPO_ROOT

LOCK = {
    "splits": {"cmd": "python -m pipeline run splits", "params": {"params.yaml": {"ci.data.seed": 3}},
               "outs": [{"path": "data/splits", "md5": "aaa.dir"}]},
    "corpus": {"cmd": "python -m pipeline run corpus", "outs": [{"path": "data/corpus", "md5": "bbb.dir"}]},
    "report": {"cmd": "python -m pipeline run report", "outs": [{"path": "reports/metrics.json", "md5": "ccc"}]},
}


@pytest.fixture()
def repo(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MAOPD_GIT_COMMIT", "c0ffee")
    (tmp_path / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": LOCK}))
    return tmp_path


@pytest.fixture()
def params():
    return load_params(REPO_ROOT / "params.yaml", profile="ci")


def _runs(repo) -> dict[str, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{repo}/mlflow.db")
    experiment = client.get_experiment_by_name(experiment_name("ci"))
    out: dict[str, list] = {}
    for run in client.search_runs([experiment.experiment_id], order_by=["attributes.start_time ASC"]):
        out.setdefault(run.info.run_name, []).append(run)
    return out


def test_a_stage_dvc_did_not_run_gets_a_run_that_says_so(repo, params):
    done = {r.stage: r.action for r in record_runs(params, repo)}
    assert done == {"splits": "recorded", "corpus": "recorded", "report": "recorded"}
    runs = _runs(repo)
    assert set(runs) == set(LOCK) and all(len(v) == 1 for v in runs.values())  # named after the stage
    splits = runs["splits"][0]
    assert splits.data.tags[STATE_TAG] == dvc_state(LOCK["splits"])
    assert splits.data.tags[OUTCOME_TAG].startswith("not run")
    assert splits.data.tags["stage"] == "splits" and splits.data.params["ci.data.seed"] == "3"
    assert "data/splits (md5 aaa.dir)" in splits.data.tags["mlflow.note.content"]
    # the report's outputs are not in this folder: the run is still recorded, and says so
    assert "not in this checkout" in runs["report"][0].data.tags["mlflow.note.content"]


def test_an_entry_of_a_stage_dvc_yaml_no_longer_has_gets_no_run(repo, params):
    """DVC keeps the dvc.lock entry of a renamed stage (`teacher` before it was `train@c_mas_rl`)."""
    stale = {**LOCK, "teacher": {"cmd": "python -m pipeline run teacher",
                                 "outs": [{"path": "data/models/teacher", "md5": "ddd.dir"}]}}
    (repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": stale}))
    assert {r.stage for r in record_runs(params, repo)} == set(LOCK)
    assert "teacher" not in _runs(repo)


def test_a_second_call_adds_nothing_and_a_new_state_adds_a_run(repo, params):
    record_runs(params, repo)
    assert {r.action for r in record_runs(params, repo)} == {"present"}
    assert sum(len(v) for v in _runs(repo).values()) == 3
    changed = {**LOCK, "splits": {**LOCK["splits"], "outs": [{"path": "data/splits", "md5": "ddd.dir"}]}}
    (repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": changed}))
    assert {r.stage: r.action for r in record_runs(params, repo)}["splits"] == "recorded"
    assert len(_runs(repo)["splits"]) == 2


def test_the_run_a_stage_opened_during_the_repro_is_tagged_not_duplicated(repo, params):
    with stage_run("corpus", "ci", root=repo):
        pass  # an earlier repro's run: not the one that made this state
    since = time.time()
    time.sleep(0.01)
    with stage_run("splits", "ci", root=repo) as mlf:
        ran = mlf.active_run().info.run_id
    done = {r.stage: (r.action, r.run_id) for r in record_runs(params, repo, since=since)}
    assert done["splits"] == ("tagged", ran)
    assert done["corpus"][0] == "recorded"  # its only run began before this repro
    splits = _runs(repo)["splits"]
    assert len(splits) == 1 and splits[0].data.tags[OUTCOME_TAG] == "ran"
    assert splits[0].data.tags[STATE_TAG] == dvc_state(LOCK["splits"])


def test_the_outcome_of_each_stage_can_be_named(repo, params):
    record_runs(params, repo, stages=["splits=restored", "corpus=skipped"])
    runs = _runs(repo)
    assert set(runs) == {"splits", "corpus"}
    assert "run cache" in runs["splits"][0].data.tags[OUTCOME_TAG]
    assert "up to date" in runs["corpus"][0].data.tags[OUTCOME_TAG]


def test_a_stage_missing_from_dvc_lock_is_an_input_error(repo, params):
    from pipeline.errors import InputError

    with pytest.raises(InputError, match="no dvc.lock entry for index"):
        record_runs(params, repo, stages=["index"])


def _trained(repo, system: str, weights: bytes, dev_em: list[float]) -> tuple[str, str]:
    """The `train@<system>` stage in `repo`: its weights, its curves file (data/curves/<system>.csv:
    `dev_em` and a dev Searcher KL) and the record of its run, which logged the same curve; returns
    the run id and the weights' hash."""
    from pipeline.eval.run import model_fingerprint
    from pipeline.paths import model_dir
    from pipeline.report.curves import stage_curves_path, write_stage_curves
    from pipeline.tracking.artifacts import KIND_TAG, WEIGHTS_SHA_TAG

    folder = model_dir(repo, system)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.safetensors").write_bytes(weights)
    sha = model_fingerprint(folder)
    history = _history(dev_em)
    with stage_run(f"train@{system}", "ci", {"shared.dev_questions": 128}, tags={"system": system}, root=repo) as mlf:
        for point in history:
            mlf.log_metrics({k: v for k, v in point.items() if k != "step"}, step=point["step"])
        mlf.set_tags({KIND_TAG: "training", WEIGHTS_SHA_TAG: sha})
        run_id = mlf.active_run().info.run_id
    write_stage_curves(stage_curves_path(repo, system), history, {"dev_em": 128, "dev_searcher_kl": 128})
    return run_id, sha


def _history(dev_em: list[float]) -> list[dict[str, float]]:
    return [{"step": step, "dev_em": value, "dev_searcher_kl": 0.01 * (i + 1)}
            for i, (step, value) in enumerate(zip((0, 16, 32), dev_em))]


def _lock_with_training(repo, system: str, md5: str = "eee.dir") -> None:
    entry = {"cmd": f"python -m pipeline run train {system}",
             "outs": [{"path": f"data/models/{system}", "md5": md5}]}
    (repo / "dvc.lock").write_text(yaml.safe_dump({"schema": "2.0", "stages": {f"train@{system}": entry}}))


def _history_of(client, run_id: str, key: str) -> list[tuple[int, float]]:
    return sorted((m.step, m.value) for m in client.get_metric_history(run_id, key))


def test_a_recorded_training_run_logs_the_curves_of_its_stages_file_tagged_made_by_run(repo, params):
    """DVC restored `train@multiagent_opd` (its weights, curves file and record): the recorded run
    logs the points of data/curves/multiagent_opd.csv and names the run of the record, though a
    newer run of the same stage and weights with other curves is in the store."""
    from mlflow.tracking import MlflowClient

    from pipeline.record_runs import MADE_BY_TAG
    from pipeline.tracking.artifacts import KIND_TAG, WEIGHTS_SHA_TAG

    source, sha = _trained(repo, "multiagent_opd", b"weights", [0.25, 0.30, 0.35])
    with stage_run("train@multiagent_opd", "ci", tags={"system": "multiagent_opd"}, root=repo / "elsewhere") as mlf:
        for step in (0, 16, 32, 48):  # made in another checkout: other curves, the same weights
            mlf.log_metrics({"dev_em": 0.99, "dev_searcher_kl": 0.5}, step=step)
        mlf.set_tags({KIND_TAG: "training", WEIGHTS_SHA_TAG: sha})
        newer = mlf.active_run().info.run_id
    _lock_with_training(repo, "multiagent_opd")
    (done,) = record_runs(params, repo)
    assert done.action == "recorded" and done.run_id not in (source, newer)
    client = MlflowClient(f"sqlite:///{repo}/mlflow.db")
    recorded = client.get_run(done.run_id)
    assert recorded.data.tags[MADE_BY_TAG] == source and recorded.data.tags[OUTCOME_TAG].startswith("not run")
    assert "curves_from" not in recorded.data.tags  # nothing is copied from another run any more
    history = _history([0.25, 0.30, 0.35])
    for key in ("dev_em", "dev_searcher_kl"):
        assert _history_of(client, done.run_id, key) == [(p["step"], pytest.approx(p[key])) for p in history], key
    note = recorded.data.tags["mlflow.note.content"]
    assert "6 curve points are logged from data/curves/multiagent_opd.csv" in note
    assert f"made by run {source}" in note and newer not in note


def test_a_recorded_training_run_without_a_record_or_a_curves_file_says_so(repo, params):
    """Without the stage's record the recorded run still logs the curves file, naming no run; without
    the curves file it logs no curve, whatever training runs of the store hold."""
    from mlflow.tracking import MlflowClient

    from pipeline.record_runs import MADE_BY_TAG
    from pipeline.report.curves import stage_curves_path
    from pipeline.tracking.stage_record import record_path

    source, _ = _trained(repo, "multiagent_opd", b"weights", [0.25, 0.30, 0.35])
    client = MlflowClient(f"sqlite:///{repo}/mlflow.db")
    record_path(repo, "train@multiagent_opd").unlink()  # outputs made where no record was written
    _lock_with_training(repo, "multiagent_opd", "e1.dir")
    (done,) = record_runs(params, repo)
    recorded = client.get_run(done.run_id)
    assert MADE_BY_TAG not in recorded.data.tags and source not in recorded.data.tags["mlflow.note.content"]
    assert _history_of(client, done.run_id, "dev_em") == [(0, 0.25), (16, 0.30), (32, 0.35)]

    stage_curves_path(repo, "multiagent_opd").unlink()
    _lock_with_training(repo, "multiagent_opd", "e2.dir")
    (done,) = record_runs(params, repo)
    recorded = client.get_run(done.run_id)
    assert "dev_em" not in recorded.data.metrics and "dev_searcher_kl" not in recorded.data.metrics
    assert "wrote no curves file (data/curves/multiagent_opd.csv)" in recorded.data.tags["mlflow.note.content"]


def test_the_model_is_logged_once_per_draw_found_behind_pages_of_recorded_runs(repo, params, monkeypatch):
    """Each `make repro` that skips a training stage records one more run with the same weights'
    hash; the search for a run that logged them reads past every page of those, and a run of
    another draw (here: another precision path) logs its own model version, with its draw's tags."""
    from mlflow.tracking import MlflowClient

    import pipeline.record_runs as records
    import pipeline.tracking.artifacts as artifacts
    from pipeline.code_version import code_version

    logged = []

    def fake_log_model(mlf, folder, name, tags, max_mb):
        logged.append(tags)
        mlf.set_tag("model_logged", f"yes: {name} version {len(logged)}")
        return "models:/fake"

    monkeypatch.setattr(records, "SEARCH_PAGE_SIZE", 1)
    monkeypatch.setattr(artifacts, "log_model", fake_log_model)
    _trained(repo, "multiagent_opd", b"weights", [0.25, 0.30, 0.35])
    client = MlflowClient(f"sqlite:///{repo}/mlflow.db")
    for i, md5 in enumerate(("e1.dir", "e2.dir", "e3.dir")):  # three repros, three dvc.lock states, same weights
        time.sleep(0.01)
        _lock_with_training(repo, "multiagent_opd", md5)
        (done,) = record_runs(params, repo)
        assert done.action == "recorded"
        tag = client.get_run(done.run_id).data.tags["model_logged"]
        assert tag.startswith("yes") if i == 0 else tag.startswith("no: another run of this store"), (md5, tag)
    assert len(logged) == 1
    assert logged[0]["draw.precision"] == "unknown" and logged[0]["draw.code"] == code_version()

    (repo / "params.yaml").write_text((REPO_ROOT / "params.yaml").read_text())  # another draw: its precision known
    _lock_with_training(repo, "multiagent_opd", "e4.dir")
    (done,) = record_runs(params, repo)
    assert client.get_run(done.run_id).data.tags["model_logged"].startswith("yes")
    assert len(logged) == 2 and logged[1]["draw.precision"] != "unknown"
    assert {k: v for k, v in logged[1].items() if k not in ("draw.precision", "draw.threads")} == {
        k: v for k, v in logged[0].items() if k not in ("draw.precision", "draw.threads")}
