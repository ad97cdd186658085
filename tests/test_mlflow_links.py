"""Links into MLflow name the run by its id, the one the stage that made an output recorded
(data/runs/<stage>.json), and the server of `make mlflow-ui` (pipeline.tracking.server) opens
that very run or serves that run's artifact, never "the newest run of this name": a later run of
the same stage in the store (another draw, a re-run, a run `record-runs` adds) changes nothing a
committed report or a flow summary links to. Anything missing is a 404 that says what."""

from __future__ import annotations

import re
import time

import pytest

from flows.summary import summary_markdown
from pipeline.tracking.artifacts import DATA_DOCS_ARTIFACT, log_data_docs
from pipeline.tracking.links import REPORT_SOURCES, artifact_link, experiment_link, report_file_link, run_link, ui_url
from pipeline.tracking.runs import experiment_name, stage_run
from pipeline.tracking.stage_record import read_record, record_path

UI = "http://127.0.0.1:5000"


@pytest.fixture()
def store(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MAOPD_GIT_COMMIT", "c0ffee")
    monkeypatch.setenv("MLFLOW_UI_URL", UI)
    return uri


@pytest.fixture()
def client(store):
    from flask import Flask

    from pipeline.tracking.server import register

    return register(Flask("links"), store).test_client()


def _run(stage: str, root, files: dict[str, str] | None = None, docs: dict[str, str] | None = None,
         record: bool = True) -> str:
    """A FINISHED run of `stage` on the ci profile logging `files` at its artifacts' root and a
    Data Docs site `docs`; with `record`, it writes the stage's record under `root`, as every
    stage does. Returns the run's id."""
    with stage_run(stage, "ci", root=root, record=record) as mlf:
        out = root / "out" / mlf.active_run().info.run_id
        for name, text in (files or {}).items():
            (out / name).parent.mkdir(parents=True, exist_ok=True)
            (out / name).write_text(text)
            mlf.log_artifact(str(out / name))
        if docs is not None:
            site = out / "site"
            for name, text in docs.items():
                (site / name).parent.mkdir(parents=True, exist_ok=True)
                (site / name).write_text(text)
            log_data_docs(mlf, site)
        run_id = mlf.active_run().info.run_id
    time.sleep(0.01)  # distinct start times: "the newest" is well defined
    return run_id


def _local(link: str) -> str:
    """A link's route on the server (what a browser asks `make mlflow-ui`'s server for)."""
    assert link.startswith(UI + "/maopd/"), link
    return link[len(UI):]


def test_links_name_the_run_by_its_id(monkeypatch):
    monkeypatch.setenv("MLFLOW_UI_URL", "http://127.0.0.1:5001/")
    assert ui_url() == "http://127.0.0.1:5001"
    run_id = "0123456789abcdef0123456789abcdef"
    assert run_link(run_id) == f"http://127.0.0.1:5001/maopd/run/{run_id}"
    assert artifact_link(run_id, "data_docs/index.html") == \
        f"http://127.0.0.1:5001/maopd/artifacts/{run_id}/data_docs/index.html"
    assert experiment_link(experiment_name("ci"), "tags.kind = 'training'") == \
        "http://127.0.0.1:5001/maopd/experiments/multiagent-opd-ci?search=tags.kind+%3D+%27training%27"


def test_a_run_link_opens_that_run_even_when_a_newer_run_of_the_stage_exists(client, tmp_path):
    made = _run("report", tmp_path)
    newer = _run("report", tmp_path, record=False)  # a later run of the same stage, e.g. another draw's
    assert read_record(tmp_path, "report").run_id == made != newer
    answer = client.get(_local(run_link(made)))
    assert answer.status_code == 302
    assert re.fullmatch(rf"/#/experiments/\d+/runs/{made}\?workflowType=machine_learning",
                        answer.headers["Location"])
    train = _run("train@c_mas_rl", tmp_path)
    assert record_path(tmp_path, "train@c_mas_rl") == tmp_path / "data/runs/train/c_mas_rl.json"
    assert client.get(_local(run_link(read_record(tmp_path, "train@c_mas_rl").run_id))).headers["Location"] \
        .split("/runs/")[1].startswith(train)


def test_an_unknown_run_is_a_404_that_names_it(client, tmp_path):
    _run("splits", tmp_path)
    missing = "0123456789abcdef0123456789abcdef"
    for run_id in (missing, "not-a-run-id"):
        answer = client.get(f"/maopd/run/{run_id}")
        assert answer.status_code == 404 and answer.mimetype == "text/html"
        assert b"no run" in answer.data and run_id.encode() in answer.data, answer.data
    answer = client.get(f"/maopd/artifacts/{missing}/paper.html")
    assert answer.status_code == 404 and b"no run" in answer.data and missing.encode() in answer.data


def test_the_experiment_link_opens_the_runs_table_with_a_search(client, tmp_path):
    assert client.get("/maopd/experiments/multiagent-opd-ci").status_code == 404  # no experiment yet
    _run("splits", tmp_path)
    answer = client.get("/maopd/experiments/multiagent-opd-ci?search=tags.kind = 'training'")
    assert answer.status_code == 302
    assert re.fullmatch(r"/#/experiments/\d+/runs\?workflowType=machine_learning"
                        r"&searchFilter=tags.kind%20%3D%20%27training%27", answer.headers["Location"])


def test_an_artifact_link_serves_the_file_of_that_run_not_of_the_newest(client, tmp_path):
    made = _run("report", tmp_path, files={"paper.html": "<html>the report this run made</html>"})
    _run("report", tmp_path, files={"paper.html": "<html>a newer run's report</html>"}, record=False)
    answer = client.get(_local(artifact_link(made, "paper.html")))
    assert answer.status_code == 200 and answer.mimetype == "text/html"
    assert answer.headers["Cache-Control"] == "no-store"
    assert answer.data == b"<html>the report this run made</html>"


def test_a_missing_artifact_a_folder_or_a_path_outside_the_run_is_a_404(client, tmp_path):
    run_id = _run("validate_splits", tmp_path, docs={"index.html": "<html>splits index</html>"})
    answer = client.get(f"/maopd/artifacts/{run_id}/paper.html")
    assert answer.status_code == 404 and run_id.encode() in answer.data and b"paper.html" in answer.data
    answer = client.get(f"/maopd/artifacts/{run_id}/{DATA_DOCS_ARTIFACT}")
    assert answer.status_code == 404 and b"folder" in answer.data
    for path in ("data_docs/../../mlflow.db", "./data_docs/index.html", "data_docs/./index.html"):
        answer = client.get(f"/maopd/artifacts/{run_id}/{path}")
        assert answer.status_code == 404 and b"not a relative path" in answer.data, (path, answer.data)
    assert client.get(f"/maopd/artifacts/{run_id}/data_docs/index.html").data == b"<html>splits index</html>"


def test_report_files_link_to_the_artifacts_of_the_run_their_stage_recorded(client, tmp_path):
    report = _run("report", tmp_path, files={"paper.html": "<html>the report</html>"})
    splits = _run("validate_splits", tmp_path, docs={"index.html": "<html>splits index</html>",
                                                       "validations/a/b.html": "<html>a page</html>"})
    _run("validate_splits", tmp_path, docs={"index.html": "<html>a newer index</html>"}, record=False)
    assert report_file_link(tmp_path, "ci", "paper.html") == artifact_link(report, "paper.html")
    index = report_file_link(tmp_path, "ci", "data_docs/splits/index.html")
    assert index == artifact_link(splits, "data_docs/index.html")
    assert client.get(_local(index)).data == b"<html>splits index</html>"
    page = index.rsplit("/", 1)[0] + "/validations/a/b.html"  # a relative link of the index
    assert client.get(_local(page)).data == b"<html>a page</html>"
    assert report_file_link(tmp_path, "ci", "data_docs/masks/index.html") is None  # validate_masks has no record
    assert report_file_link(tmp_path, "tiny", "paper.html") is None  # the record is the ci profile's


def test_report_sources_match_where_the_stages_log_their_files():
    assert [(prefix, stage) for prefix, stage, _ in REPORT_SOURCES] == [
        ("data_docs/splits/", "validate_splits"), ("data_docs/masks/", "validate_masks"), ("", "report")]
    assert {artifact for *_, artifact in REPORT_SOURCES} == {f"{DATA_DOCS_ARTIFACT}/", ""}


def test_the_summary_links_each_stage_to_the_run_it_recorded(client, tmp_path):
    folder = tmp_path / "reports" / "ci"
    (folder / "data_docs" / "splits").mkdir(parents=True)
    (folder / "data_docs" / "splits" / "index.html").write_text("<html>splits index</html>")
    (folder / "paper.html").write_text("<html>the report</html>")
    made = {"splits": _run("splits", tmp_path),
            "validate_splits": _run("validate_splits", tmp_path, docs={"index.html": "<html>splits index</html>"}),
            "report": _run("report", tmp_path, files={"paper.html": "<html>the report</html>"})}
    for stage in made:  # later runs of every stage (record-runs, another draw) change no link
        _run(stage, tmp_path, files={"paper.html": "<html>newer</html>"}, record=False)
    md = summary_markdown(tmp_path, "ci", {**dict.fromkeys(made, "ran"), "index": "skipped", "evaluate@x": "failed"})
    for stage, run_id in made.items():
        assert f"| [{stage}]({run_link(run_id)}) | ran |" in md
        assert client.get(_local(run_link(run_id))).headers["Location"].split("/runs/")[1].startswith(run_id)
    assert "| index | skipped, no run recorded |" in md and "| evaluate@x | failed |" in md
    links = re.findall(r"\]\(([^)]+)\)", md)
    assert artifact_link(made["report"], "paper.html") in links
    assert artifact_link(made["validate_splits"], "data_docs/index.html") in links
    for link in links:  # every link opens in the server: a redirect, or the file the run made
        answer = client.get(_local(link))
        assert answer.status_code in (200, 302), (link, answer.data)
        assert b"newer" not in answer.data
    assert client.get(_local(artifact_link(made["report"], "paper.html"))).data == b"<html>the report</html>"


def test_the_server_app_is_registered_for_mlflow_server():
    from importlib.metadata import entry_points

    apps = {e.name: e.value for e in entry_points(group="mlflow.app")}
    assert apps.get("maopd") == "pipeline.tracking.server:create_app"
