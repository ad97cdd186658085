"""Links into MLflow that hold in any checkout: they name the experiment, the run (a stage) or a
file of the report folder, never an id, and the server of `make mlflow-ui` (pipeline.mlflow_app)
resolves them when opened: to the newest run of that name, or to the file among the artifacts of
the run that wrote it; anything missing is a 404 that says what is missing."""

from __future__ import annotations

import re
import time

import pytest

from pipeline.mlflow_ui import experiment_link, report_link, run_link
from pipeline.run_artifacts import log_data_docs
from pipeline.tracking import experiment_name, stage_run

ID = re.compile(r"[0-9a-f]{32}")


@pytest.fixture()
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MAOPD_GIT_COMMIT", "c0ffee")
    monkeypatch.setenv("MLFLOW_UI_URL", "http://127.0.0.1:5000")
    return uri


@pytest.fixture()
def client(store):
    from flask import Flask

    from pipeline.mlflow_app import register

    return register(Flask("links"), store).test_client()


def _run(stage: str, root, files: dict[str, str] | None = None, docs: dict[str, str] | None = None) -> str:
    with stage_run(stage, "ci", root=root) as mlf:
        for name, text in (files or {}).items():
            path = root / "out" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text)
            mlf.log_artifact(str(path))
        if docs is not None:
            site = root / f"site-{stage}"
            for name, text in docs.items():
                (site / name).parent.mkdir(parents=True, exist_ok=True)
                (site / name).write_text(text)
            log_data_docs(mlf, site)
        return mlf.active_run().info.run_id


def test_links_name_the_experiment_the_stage_and_the_file_never_an_id(store):
    experiment = experiment_name("tiny")
    assert run_link(experiment, "train@c_mas_rl") == \
        "http://127.0.0.1:5000/maopd/runs/multiagent-opd-tiny/train@c_mas_rl"
    assert experiment_link(experiment) == "http://127.0.0.1:5000/maopd/experiments/multiagent-opd-tiny"
    assert experiment_link(experiment, "tags.kind = 'training'").endswith(
        "?search=tags.kind+%3D+%27training%27")
    assert report_link("tiny", "data_docs/splits/index.html") == \
        "http://127.0.0.1:5000/maopd/reports/tiny/data_docs/splits/index.html"


def test_a_run_link_opens_the_newest_run_of_that_name(client, tmp_path):
    _run("report", tmp_path)
    time.sleep(0.01)
    newest = _run("report", tmp_path)
    answer = client.get("/maopd/runs/multiagent-opd-ci/report")
    assert answer.status_code == 302
    assert re.fullmatch(rf"/#/experiments/\d+/runs/{newest}\?workflowType=machine_learning",
                        answer.headers["Location"])
    train = _run("train@c_mas_rl", tmp_path)
    assert client.get("/maopd/runs/multiagent-opd-ci/train@c_mas_rl").headers["Location"].split("/runs/")[1] \
        .startswith(train)


def test_the_experiment_link_opens_the_runs_table_with_a_search(client, tmp_path):
    _run("splits", tmp_path)
    answer = client.get("/maopd/experiments/multiagent-opd-ci?search=tags.kind = 'training'")
    assert answer.status_code == 302
    assert re.fullmatch(r"/#/experiments/\d+/runs\?workflowType=machine_learning"
                        r"&searchFilter=tags.kind%20%3D%20%27training%27", answer.headers["Location"])


def test_what_the_store_lacks_is_a_404_that_says_what(client, tmp_path):
    answer = client.get("/maopd/runs/multiagent-opd-ci/report")
    assert answer.status_code == 404 and b"no experiment" in answer.data
    _run("splits", tmp_path)
    answer = client.get("/maopd/runs/multiagent-opd-ci/report")
    assert answer.status_code == 404 and b"no run named" in answer.data and b"report" in answer.data
    assert client.get("/maopd/reports/ci/paper.html").status_code == 404


def test_report_files_come_from_the_run_that_wrote_them(client, tmp_path):
    _run("report", tmp_path, files={"paper.html": "<html>the report</html>"})
    _run("validate_splits", tmp_path, docs={"index.html": "<html>splits index</html>",
                                              "validations/a/b.html": "<html>a page</html>"})
    answer = client.get("/maopd/reports/ci/paper.html")
    assert answer.status_code == 200 and answer.mimetype == "text/html" and b"the report" in answer.data
    index = client.get("/maopd/reports/ci/data_docs/splits/index.html")
    assert index.status_code == 200 and b"splits index" in index.data
    page = client.get("/maopd/reports/ci/data_docs/splits/validations/a/b.html")  # a relative link of the index
    assert page.status_code == 200 and b"a page" in page.data
    assert client.get("/maopd/reports/ci/data_docs/masks/index.html").status_code == 404  # masks never ran
    assert client.get("/maopd/reports/ci/../mlflow.db").status_code == 404


def test_the_server_app_is_registered_for_mlflow_server():
    from importlib.metadata import entry_points

    apps = {e.name: e.value for e in entry_points(group="mlflow.app")}
    assert apps.get("maopd") == "pipeline.mlflow_app:create_app"
    assert not ID.search(run_link(experiment_name("ci"), "report"))
