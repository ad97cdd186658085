"""Training curves and run ids read back from MLflow (the trainer's and the evaluations' runs).

The trainer logs per step, in runs named after its stage ("teacher", "team", ...) and
tagged system=<name>, the metrics `dev_em` and `dev_no_search_share`. For each run
name the latest run counts.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pandas as pd

from pipeline.systems import SYSTEMS
from pipeline.tracking import experiment_name, tracking_uri

CURVE_METRICS = ("dev_em", "dev_no_search_share")


@dataclass(frozen=True)
class RunInfo:
    name: str
    run_id: str
    system: str
    kind: str  # training | evaluation
    start_time: int


def _latest_runs(profile: str, root: Path | None) -> list[RunInfo]:
    """Latest run per run name in the profile's experiment that carries a system tag."""
    import mlflow

    mlflow.set_tracking_uri(tracking_uri(root))
    if mlflow.get_experiment_by_name(experiment_name(profile)) is None:
        return []
    runs = mlflow.search_runs(experiment_names=[experiment_name(profile)], output_format="list",
                              filter_string="attributes.status != 'FAILED'")
    latest: dict[str, RunInfo] = {}
    for run in runs:
        system = run.data.tags.get("system")
        name = run.info.run_name or ""
        if not system:
            continue
        info = RunInfo(name, run.info.run_id, system,
                       "evaluation" if name.startswith("evaluate@") else "training", run.info.start_time or 0)
        if name not in latest or info.start_time > latest[name].start_time:
            latest[name] = info
    order = {s.name: i for i, s in enumerate(SYSTEMS)}
    return sorted(latest.values(), key=lambda r: (order.get(r.system, len(order)), r.kind, r.name))


def _history(client, run_id: str, key: str) -> pd.Series:
    points = client.get_metric_history(run_id, key)
    frame = pd.DataFrame([(m.step, m.timestamp, m.value) for m in points], columns=["step", "ts", "value"])
    frame = frame.sort_values(["step", "ts"]).drop_duplicates("step", keep="last")
    return frame.set_index("step")["value"].rename(key)


def read_mlflow(profile: str, root: Path | None = None) -> tuple[dict[str, pd.DataFrame], list[RunInfo]]:
    """({system: curve frame (step, dev_em, dev_no_search_share)}, runs used).

    A system's curve comes from its latest training run that logged `dev_em`.
    """
    from mlflow.tracking import MlflowClient

    runs = _latest_runs(profile, root)
    client = MlflowClient(tracking_uri(root))
    curves: dict[str, pd.DataFrame] = {}
    used: list[RunInfo] = []
    trained = [r for r in runs if r.kind == "training"]
    for system in [s.name for s in SYSTEMS if s.mode is not None]:
        candidates = sorted((r for r in trained if r.system == system), key=lambda r: -r.start_time)
        for run in candidates:
            series = [_history(client, run.run_id, key) for key in CURVE_METRICS]
            if series[0].empty:
                continue
            curve = pd.concat(series, axis=1).sort_index().rename_axis("step").reset_index()
            curves[system] = curve[["step", *CURVE_METRICS]]
            used.append(run)
            break
    used += [r for r in runs if r.kind == "evaluation"]
    return curves, used
