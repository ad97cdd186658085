"""Links into the MLflow UI (`make mlflow-ui`): the base URL comes from MLFLOW_UI_URL.

Experiment links open the runs table in the model-training view: MLflow 3's UI reads the
view from the `workflowType` query parameter, and otherwise from the browser's last choice.
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
