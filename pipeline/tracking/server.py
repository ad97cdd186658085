"""The MLflow server of `make mlflow-ui`, with the routes of the project's links
(pipeline.tracking.links). A link names a run by its id, the one the stage that made an output
recorded (data/runs/<stage>.json, pipeline.tracking.stage_record), so it opens the run that made
that output in any store that holds it, never "the newest run of this name":

- `/maopd/experiments/<experiment>[?search=...]`: the experiment's runs table (model-training
  view), the run search filled in when given;
- `/maopd/run/<run id>`: the run's page in MLflow's UI (the server looks up its experiment);
- `/maopd/artifacts/<run id>/<path>`: the file `path` among the run's artifacts, served as a page
  (with its mimetype, never cached), so the report and the Data Docs open from the http UIs
  (MLflow, Prefect), their relative links included.

Anything not in the store answers 404 with a page that says what is missing. The routes are
added to MLflow's own Flask app; `mlflow server --app-name maopd` loads them (the entry point
`mlflow.app` in pyproject.toml), and the rest of the server is MLflow's, unchanged.
"""

from __future__ import annotations

import html
import mimetypes
import os
import tempfile
from pathlib import Path
from typing import Any

from pipeline.tracking.links import LINK_PREFIX, VIEW

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


def find_run(client: Any, run_id: str) -> Any:
    """The run `run_id` of the store; NotFound when the store has no such run."""
    from mlflow.exceptions import MlflowException

    try:
        return client.get_run(run_id)
    except MlflowException:  # no such run, or not a run id at all
        raise NotFound(f"no run {run_id!r} in this store: the link names the run that made an output in "
                       "another MLflow store, or a run that was deleted from this one") from None


def artifact_path(path: str) -> str:
    """`path` as a relative artifact path; NotFound for an empty, absolute or `..` path."""
    parts = path.split("/")
    if not path or path.startswith("/") or "\\" in path or any(p in ("", ".", "..") for p in parts):
        raise NotFound(f"{path!r} is not a relative path of a file among a run's artifacts")
    return path


def experiment_target(client: Any, experiment: str, search: str | None = None) -> str:
    """The UI route (after the server's root) of the experiment's runs table."""
    from urllib.parse import quote

    found = _experiment(client, experiment)
    query = f"&searchFilter={quote(search, safe='')}" if search else ""
    return f"/#/experiments/{found.experiment_id}/runs?{VIEW}{query}"


def run_target(client: Any, run_id: str) -> str:
    """The UI route (after the server's root) of the run's page."""
    run = find_run(client, run_id)
    return f"/#/experiments/{run.info.experiment_id}/runs/{run.info.run_id}?{VIEW}"


def artifact_file(client: Any, run_id: str, path: str) -> tuple[bytes, str]:
    """(content, mimetype) of the artifact file `path` of run `run_id`."""
    artifact = artifact_path(path)
    run = find_run(client, run_id)
    with tempfile.TemporaryDirectory() as tmp:
        try:
            local = Path(client.download_artifacts(run.info.run_id, artifact, tmp))
        except Exception as error:  # MLflow raises several kinds for a missing artifact
            raise NotFound(f"run {run_id} ({run.info.run_name}) holds no artifact {artifact!r} "
                           f"({type(error).__name__})") from None
        if not local.is_file():
            raise NotFound(f"artifact {artifact!r} of run {run_id} ({run.info.run_name}) is a folder, not a file")
        content = local.read_bytes()
    return content, mimetypes.guess_type(artifact)[0] or "application/octet-stream"


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

    def run(run_id: str):
        return redirect(prefix + run_target(_client(tracking_uri), run_id))

    def artifact(run_id: str, path: str):
        content, mimetype = artifact_file(_client(tracking_uri), run_id, path)
        return Response(content, mimetype=mimetype, headers={"Cache-Control": "no-store"})

    app.add_url_rule(f"{prefix}{LINK_PREFIX}/experiments/<name>", view_func=guarded(experiment))
    app.add_url_rule(f"{prefix}{LINK_PREFIX}/run/<run_id>", view_func=guarded(run))
    app.add_url_rule(f"{prefix}{LINK_PREFIX}/artifacts/<run_id>/<path:path>", view_func=guarded(artifact))
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
