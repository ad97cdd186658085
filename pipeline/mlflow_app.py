"""The MLflow server of `make mlflow-ui`, with routes that resolve the project's stable links
(pipeline.mlflow_ui) when they are opened, so a link never carries a run or experiment id:

- `/maopd/experiments/<experiment>[?search=...]`: the experiment's runs table (model-training
  view), the run search filled in when given;
- `/maopd/runs/<experiment>/<run name>`: the newest finished run of that name (else the newest
  of any status), i.e. the stage's latest run;
- `/maopd/reports/<profile>/<path>`: a file of `reports/<profile>/`, served from the artifacts of
  the newest run of the stage that wrote it (REPORT_SOURCES), so the report and the Data Docs
  open from the http UIs (MLflow, Prefect), their relative links included.

Anything not in the store answers 404 with a page that says what is missing. The routes are
added to MLflow's own Flask app; `mlflow server --app-name maopd` loads them (the entry point
`mlflow.app` in pyproject.toml), and the rest of the server is MLflow's, unchanged.
"""

from __future__ import annotations

import html
import mimetypes
import os
import tempfile
from pathlib import Path, PurePosixPath
from typing import Any

from pipeline.mlflow_ui import LINK_PREFIX, VIEW
from pipeline.run_artifacts import DATA_DOCS_ARTIFACT
from pipeline.tracking import experiment_name

# Where each part of reports/<profile>/ comes from: (folder prefix, stage, artifact prefix),
# the first match wins.
REPORT_SOURCES = (
    ("data_docs/splits/", "validate_splits", f"{DATA_DOCS_ARTIFACT}/"),
    ("data_docs/masks/", "validate_masks", f"{DATA_DOCS_ARTIFACT}/"),
    ("", "report", ""),
)
BACKEND_ENV = "_MLFLOW_SERVER_FILE_STORE"  # where `mlflow server` passes its backend store URI


class NotFound(LookupError):
    """What a link names is not in the store; the message says what and why."""


def _client(tracking_uri: str | None = None) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri or os.environ.get(BACKEND_ENV) or None)


def _experiment(client: Any, name: str) -> Any:
    experiment = client.get_experiment_by_name(name)
    if experiment is None:
        raise NotFound(f"no experiment {name!r} in this store: run the pipeline (`make repro`) first")
    return experiment


def _quoted(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def find_run(client: Any, experiment: str, run_name: str) -> Any:
    """The newest FINISHED run named `run_name` in the experiment, else the newest of any status."""
    found = _experiment(client, experiment)
    name = f"attributes.run_name = {_quoted(run_name)}"
    for query in (f"{name} and attributes.status = 'FINISHED'", name):
        runs = client.search_runs([found.experiment_id], query, order_by=["attributes.start_time DESC"],
                                  max_results=1)
        if runs:
            return runs[0]
    raise NotFound(f"no run named {run_name!r} in experiment {experiment!r}: its stage has not run, or was "
                   "not recorded, in this store (`make repro` records every stage)")


def report_source(path: str) -> tuple[str, str]:
    """(stage, artifact path) of a file of the report folder; NotFound for a path outside it."""
    parts = PurePosixPath(path).parts
    if not parts or any(p in ("..", "") or p.startswith("/") for p in parts) or path.endswith("/"):
        raise NotFound(f"{path!r} is not a file of the report folder")
    for prefix, stage, artifact in REPORT_SOURCES:
        if path.startswith(prefix):
            return stage, artifact + path[len(prefix):]
    raise NotFound(path)  # unreachable: the last source takes every path


def experiment_target(client: Any, experiment: str, search: str | None = None) -> str:
    """The UI route (after the server's root) of the experiment's runs table."""
    from urllib.parse import quote

    found = _experiment(client, experiment)
    query = f"&searchFilter={quote(search, safe='')}" if search else ""
    return f"/#/experiments/{found.experiment_id}/runs?{VIEW}{query}"


def run_target(client: Any, experiment: str, run_name: str) -> str:
    run = find_run(client, experiment, run_name)
    return f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?{VIEW}"


def report_file(client: Any, profile: str, path: str) -> tuple[bytes, str]:
    """(content, mimetype) of `reports/<profile>/<path>` from its stage's newest run."""
    stage, artifact = report_source(path)
    run = find_run(client, experiment_name(profile), stage)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(client.download_artifacts(run.info.run_id, artifact, tmp))
        except Exception as error:  # MLflow raises several kinds for a missing artifact
            raise NotFound(f"{path!r}: run {stage!r} (the newest, {run.info.run_id}) holds no artifact "
                           f"{artifact!r} ({type(error).__name__})") from None
        if not local.is_file():
            raise NotFound(f"{path!r}: artifact {artifact!r} of run {stage!r} is a folder, not a file")
        content = local.read_bytes()
    return content, mimetypes.guess_type(path)[0] or "application/octet-stream"


def _not_found(message: str) -> Any:
    from flask import Response

    body = (f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>Not found</title></head><body>"
            f"<h1>Not found</h1><p>{html.escape(message)}</p></body></html>")
    return Response(body, status=404, mimetype="text/html")


def register(app: Any, tracking_uri: str | None = None) -> Any:
    """Add the link routes to a Flask app (MLflow's, or a test's); returns the app."""
    from flask import Response, redirect, request

    prefix = os.environ.get("_MLFLOW_STATIC_PREFIX", "").rstrip("/")

    def guarded(view):
        def wrapped(**kwargs):
            try:
                return view(**kwargs)
            except NotFound as error:
                return _not_found(str(error))

        wrapped.__name__ = f"maopd_{view.__name__}"
        return wrapped

    def experiment(name: str):
        return redirect(prefix + experiment_target(_client(tracking_uri), name, request.args.get("search")))

    def run(name: str, run_name: str):
        return redirect(prefix + run_target(_client(tracking_uri), name, run_name))

    def report(profile: str, path: str):
        content, mimetype = report_file(_client(tracking_uri), profile, path)
        return Response(content, mimetype=mimetype, headers={"Cache-Control": "no-store"})

    app.add_url_rule(f"{prefix}{LINK_PREFIX}/experiments/<name>", view_func=guarded(experiment))
    app.add_url_rule(f"{prefix}{LINK_PREFIX}/runs/<name>/<path:run_name>", view_func=guarded(run))
    app.add_url_rule(f"{prefix}{LINK_PREFIX}/reports/<profile>/<path:path>", view_func=guarded(report))
    return app


def create_app(app: Any = None) -> Any:
    """The `mlflow.app` entry point: MLflow's server with the link routes (under uvicorn,
    MLflow's FastAPI wrapper around its Flask app, as MLflow's own basic-auth app does)."""
    from mlflow.environment_variables import _MLFLOW_SGI_NAME
    from mlflow.server import app as flask_app

    register(app or flask_app)
    if _MLFLOW_SGI_NAME.get() == "uvicorn":
        from mlflow.server.fastapi_app import create_fastapi_app

        return create_fastapi_app(app or flask_app)
    return app or flask_app
