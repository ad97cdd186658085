"""Training curves and run ids read back from MLflow (the trainer's and the evaluations' runs).

The trainer logs per step, in runs named after its stage (`train@<system>`, pipeline.systems) and
tagged system=<name>, the metrics of `pipeline.report.curves.CURVE_METRICS` (and more).
For each run name the latest run counts.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.report.curves import Curve, CurveMetric
from pipeline.systems import SYSTEMS
from pipeline.tracking import experiment_name, tracking_uri


@dataclass(frozen=True)
class RunInfo:
    name: str
    run_id: str
    system: str
    kind: str  # training | evaluation
    start_time: int
    experiment_id: str = ""


def _system_runs(profile: str, root: Path | None) -> list[RunInfo]:
    """Every run in the profile's experiment that carries a system tag and did not fail."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(root))
    experiment = mlflow.get_experiment_by_name(experiment_name(profile))
    if experiment is None:
        return []
    runs = mlflow.search_runs(experiment_ids=[experiment.experiment_id], output_format="list",
                              filter_string="attributes.status != 'FAILED'")
    return [RunInfo(run.info.run_name or "", run.info.run_id, run.data.tags["system"],
                    "evaluation" if (run.info.run_name or "").startswith("evaluate@") else "training",
                    run.info.start_time or 0, experiment.experiment_id)
            for run in runs if run.data.tags.get("system")]


def _latest_per_name(runs: Sequence[RunInfo]) -> list[RunInfo]:
    """Latest run per run name, in pipeline.systems order."""
    latest: dict[str, RunInfo] = {}
    for info in runs:
        if info.name not in latest or info.start_time > latest[info.name].start_time:
            latest[info.name] = info
    order = {s.name: i for i, s in enumerate(SYSTEMS)}
    return sorted(latest.values(), key=lambda r: (order.get(r.system, len(order)), r.kind, r.name))


def _history(client, run_id: str, key: str) -> pd.Series:
    points = client.get_metric_history(run_id, key)
    frame = pd.DataFrame([(m.step, m.timestamp, m.value) for m in points], columns=["step", "ts", "value"])
    frame = frame.sort_values(["step", "ts"]).drop_duplicates("step", keep="last")
    return frame.set_index("step")["value"].rename(key)


def _int_param(params: dict[str, str], name: str) -> int | None:
    try:
        return int(params[name])
    except (KeyError, ValueError):
        return None


def read_mlflow(profile: str, metrics: Sequence[CurveMetric], root: Path | None = None
                ) -> tuple[dict[str, Curve], list[RunInfo]]:
    """({system: its curves}, runs used), systems in pipeline.systems order.

    A system's curves come from its latest training run that logged any of `metrics`: not
    necessarily the latest run of its stage, since a run `record-runs` added for a stage DVC did
    not run has none when the store lacks the run that trained its weights
    (pipeline.stages.records).
    """
    from mlflow.tracking import MlflowClient

    every = _system_runs(profile, root)
    runs = _latest_per_name(every)
    client = MlflowClient(tracking_uri(root))
    curves: dict[str, Curve] = {}
    used: list[RunInfo] = []
    trained = [r for r in every if r.kind == "training"]
    for system in [s.name for s in SYSTEMS if s.trained]:
        for run in sorted((r for r in trained if r.system == system), key=lambda r: -r.start_time):
            series = [_history(client, run.run_id, m.key) for m in metrics]
            if all(s.empty for s in series):
                continue
            frame = pd.concat(series, axis=1).sort_index().rename_axis("step").reset_index()
            params = client.get_run(run.run_id).data.params
            curves[system] = Curve(system, run.run_id, frame,
                                   {m.key: _int_param(params, m.questions_param) for m in metrics})
            used.append(run)
            break
    used += [r for r in runs if r.kind == "evaluation"]
    return curves, used
