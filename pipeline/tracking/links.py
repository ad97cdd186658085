"""Links into the MLflow UI (`make mlflow-ui`): the base URL comes from MLFLOW_UI_URL.

A link to a run names the run by its id, the one the stage that made an output recorded beside
it (data/runs/<stage>.json, pipeline.tracking.stage_record): it opens the run that made the
number, never "the newest run of this name", so a draw or a later re-run sharing the store
changes nothing a committed report links to. The server `make mlflow-ui` starts resolves the
project's routes (pipeline.tracking.server, under LINK_PREFIX):

- `run_link(run_id)`: the run's page (the server finds its experiment);
- `artifact_link(run_id, path)`: a file among the run's artifacts, served as a page, so the
  report (paper.html, with its figures) and the Data Docs open from the http UIs;
- `experiment_link(experiment)`: the experiment's runs table, by its name;
- `report_file_link(root, profile, path)`: a file of reports/<profile>/ among the artifacts of
  the run of the stage that wrote it (REPORT_SOURCES), by the id in that stage's record.

`experiment_url` and `run_url` are MLflow's own routes, for callers that know both ids.

Experiment links open the runs table in the model-training view. MLflow 3.17's UI takes the
view from the link's `workflowType` query parameter, else from the browser's last choice
(GenAI at first); it no longer reads the experiment's `mlflow.experimentKind` tag for it.
"""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import quote, urlencode

DEFAULT_UI_URL = "http://127.0.0.1:5000"
VIEW = "workflowType=machine_learning"
LINK_PREFIX = "/maopd"  # the stable links' routes on the server (pipeline.tracking.server)


def ui_url() -> str:
    return os.environ.get("MLFLOW_UI_URL", DEFAULT_UI_URL).rstrip("/")


def experiment_url(experiment_id: str) -> str:
    return f"{ui_url()}/#/experiments/{experiment_id}/runs?{VIEW}"


def run_url(experiment_id: str, run_id: str) -> str:
    return f"{ui_url()}/#/experiments/{experiment_id}/runs/{run_id}?{VIEW}"


def experiment_link(experiment: str, search: str | None = None) -> str:
    """The experiment's runs table, by the experiment's name; `search` fills MLflow's run search
    (e.g. "tags.kind = 'training'")."""
    query = f"?{urlencode({'search': search})}" if search else ""
    return f"{ui_url()}{LINK_PREFIX}/experiments/{quote(experiment, safe='')}{query}"


def run_link(run_id: str) -> str:
    """The page of the run `run_id`."""
    return f"{ui_url()}{LINK_PREFIX}/run/{quote(run_id, safe='')}"


def artifact_link(run_id: str, path: str) -> str:
    """The file `path` among the artifacts of run `run_id` (paper.html, data_docs/index.html, ...)."""
    return f"{ui_url()}{LINK_PREFIX}/artifacts/{quote(run_id, safe='')}/{quote(path, safe='/')}"


def experiment_links(tracking_uri: str) -> list[str]:
    """One line per experiment of the store: its name and its link."""
    from mlflow.tracking import MlflowClient

    experiments = MlflowClient(tracking_uri=tracking_uri).search_experiments()
    return [f"{e.name}: {experiment_link(e.name)}" for e in experiments if e.name != "Default"]


# Where each file of reports/<profile>/ comes from: (folder prefix, stage, artifact prefix), the
# first match wins. The validation stages log their Data Docs site under `data_docs/`
# (pipeline.tracking.artifacts.DATA_DOCS_ARTIFACT); the report stage logs paper.html, paper.md,
# figures/ ... at its artifacts' root (pipeline.stages.report.log_report).
REPORT_SOURCES = (
    ("data_docs/splits/", "validate_splits", "data_docs/"),
    ("data_docs/masks/", "validate_masks", "data_docs/"),
    ("", "report", ""),
)


def report_source(path: str) -> tuple[str, str]:
    """(stage, artifact path) of the file `path` of reports/<profile>/ (REPORT_SOURCES)."""
    for prefix, stage, artifact in REPORT_SOURCES:
        if path.startswith(prefix):
            return stage, artifact + path[len(prefix):]
    raise ValueError(path)  # unreachable: the last source takes every path


def report_file_link(root: Path, profile: str, path: str) -> str | None:
    """The file `path` of reports/<profile>/ (paper.html, data_docs/splits/index.html, ...) among
    the artifacts of the run that wrote it: the run id of its stage's record under `root`. None
    when that stage has no record there, or a record of another profile."""
    from pipeline.tracking.stage_record import read_record

    stage, artifact = report_source(path)
    record = read_record(root, stage)
    if record is None or record.profile != profile:
        return None
    return artifact_link(record.run_id, artifact)
