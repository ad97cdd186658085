"""Links into the MLflow UI (`make mlflow-ui`): the base URL comes from MLFLOW_UI_URL.

Two kinds of link:

- **Stable links** name what does not change from one store to another: the experiment
  (`multiagent-opd-<profile>`), a run by its name (the stage, `train@c_mas_rl`), a file of the
  report folder (`reports/<profile>/paper.html`). The server `make mlflow-ui` starts resolves
  them when they are opened (pipeline.mlflow_app, under LINK_PREFIX): to the newest run of
  that name, or to the file among the artifacts of the run that wrote it. Committed outputs
  (the report) and the Prefect summary use only these, so they hold in any checkout.
- **Id links** (`experiment_url`, `run_url`) point at one run of one store; the stable links
  redirect to them, and a Prefect task links the very run its stage produced with one.

Experiment links open the runs table in the model-training view. MLflow 3.17's UI takes the
view from the link's `workflowType` query parameter, else from the browser's last choice
(GenAI at first); it no longer reads the experiment's `mlflow.experimentKind` tag for it.
"""

from __future__ import annotations

import os
from urllib.parse import quote, urlencode

DEFAULT_UI_URL = "http://127.0.0.1:5000"
VIEW = "workflowType=machine_learning"
LINK_PREFIX = "/maopd"  # the stable links' routes on the server (pipeline.mlflow_app)


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


def run_link(experiment: str, run_name: str) -> str:
    """The newest run named `run_name` (a stage) in the experiment, by name."""
    return f"{ui_url()}{LINK_PREFIX}/runs/{quote(experiment, safe='')}/{quote(run_name, safe='@')}"


def report_link(profile: str, path: str) -> str:
    """A file of `reports/<profile>/` (paper.html, data_docs/splits/index.html, ...), served from
    the artifacts of the run that wrote it."""
    return f"{ui_url()}{LINK_PREFIX}/reports/{quote(profile, safe='')}/{quote(path, safe='/')}"


def experiment_links(tracking_uri: str) -> list[str]:
    """One line per experiment of the store: its name and its link."""
    from mlflow.tracking import MlflowClient

    experiments = MlflowClient(tracking_uri=tracking_uri).search_experiments()
    return [f"{e.name}: {experiment_link(e.name)}" for e in experiments if e.name != "Default"]
