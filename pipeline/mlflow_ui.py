"""Links into the MLflow UI (`make mlflow-ui`): the base URL comes from MLFLOW_UI_URL.

Experiment links open the runs table in the model-training view. MLflow 3.17's UI takes the
view from the link's `workflowType` query parameter, else from the browser's last choice
(GenAI at first); it no longer reads the experiment's `mlflow.experimentKind` tag for it.
"""

from __future__ import annotations

import os

DEFAULT_UI_URL = "http://127.0.0.1:5000"
VIEW = "workflowType=machine_learning"


def ui_url() -> str:
    return os.environ.get("MLFLOW_UI_URL", DEFAULT_UI_URL).rstrip("/")


def experiment_url(experiment_id: str) -> str:
    return f"{ui_url()}/#/experiments/{experiment_id}/runs?{VIEW}"


def run_url(experiment_id: str, run_id: str) -> str:
    return f"{ui_url()}/#/experiments/{experiment_id}/runs/{run_id}?{VIEW}"


def experiment_links(tracking_uri: str) -> list[str]:
    """One line per experiment of the store: its name and its link."""
    from mlflow.tracking import MlflowClient

    experiments = MlflowClient(tracking_uri=tracking_uri).search_experiments()
    return [f"{e.name}: {experiment_url(e.experiment_id)}" for e in experiments if e.name != "Default"]
