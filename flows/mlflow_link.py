"""The MLflow run a stage produced, so a Prefect task can point at it (no Prefect here)."""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.mlflow_ui import run_url


@dataclass(frozen=True)
class StageRun:
    run_id: str
    experiment_id: str
    url: str


def profile_experiment_id(tracking_uri: str, profile: str) -> str | None:
    from mlflow.tracking import MlflowClient

    from pipeline.tracking import experiment_name

    experiment = MlflowClient(tracking_uri=tracking_uri).get_experiment_by_name(experiment_name(profile))
    return None if experiment is None else experiment.experiment_id


def find_stage_run(tracking_uri: str, profile: str, stage: str, since_s: float | None = None) -> StageRun | None:
    """The newest run tagged `stage` in the profile's experiment, started at or after
    `since_s` (epoch seconds) when given; None if there is none."""
    from mlflow.tracking import MlflowClient

    experiment_id = profile_experiment_id(tracking_uri, profile)
    if experiment_id is None:
        return None
    query = f"tags.stage = '{stage}'"
    if since_s is not None:
        query += f" and attributes.start_time >= {int(since_s * 1000)}"
    runs = MlflowClient(tracking_uri=tracking_uri).search_runs(
        [experiment_id], query, order_by=["attributes.start_time DESC"], max_results=1)
    if not runs:
        return None
    run_id = runs[0].info.run_id
    return StageRun(run_id, experiment_id, run_url(experiment_id, run_id))
