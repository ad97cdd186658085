"""The MLflow run a stage produced, so a Prefect task can point at it (no Prefect here)."""

from __future__ import annotations

import os
from dataclasses import dataclass


@dataclass(frozen=True)
class StageRun:
    run_id: str
    experiment_id: str
    url: str


def ui_url() -> str:
    return os.environ.get("MLFLOW_UI_URL", "http://127.0.0.1:5000").rstrip("/")


def find_stage_run(tracking_uri: str, profile: str, stage: str, since_s: float | None = None) -> StageRun | None:
    """The newest run tagged `stage` in the profile's experiment, started at or after
    `since_s` (epoch seconds) when given; None if there is none."""
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import experiment_name

    client = MlflowClient(tracking_uri=tracking_uri)
    experiment = client.get_experiment_by_name(experiment_name(profile))
    if experiment is None:
        return None
    query = f"tags.stage = '{stage}'"
    if since_s is not None:
        query += f" and attributes.start_time >= {int(since_s * 1000)}"
    runs = client.search_runs([experiment.experiment_id], query, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        return None
    run_id = runs[0].info.run_id
    return StageRun(run_id, experiment.experiment_id,
                    f"{ui_url()}/#/experiments/{experiment.experiment_id}/runs/{run_id}")
