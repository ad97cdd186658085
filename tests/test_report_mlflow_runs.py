"""The report's training curves come from the run that logged them, also when a later run of the
same stage, added by `record-runs` for a stage DVC did not run, has none."""

from __future__ import annotations

import time

import mlflow
import pytest

from pipeline.report.curves import CURVE_METRICS
from pipeline.report.mlflow_runs import read_mlflow

STAGE, SYSTEM = "train@multiagent_opd", "multiagent_opd"
KEY = CURVE_METRICS[0].key


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_tracking_uri(f"sqlite:///{tmp_path / 'mlflow.db'}")
    mlflow.set_experiment("multiagent-opd-ci")
    return tmp_path


def _run(name: str, values: list[float] | None) -> str:
    time.sleep(0.01)  # distinct start times
    with mlflow.start_run(run_name=name, tags={"system": SYSTEM, "stage": name}) as run:
        for step, value in enumerate(values or []):
            mlflow.log_metric(KEY, value, step=step)
    return run.info.run_id


def test_a_later_run_without_curves_does_not_hide_the_training_run(store):
    trained = _run(STAGE, [0.1, 0.2, 0.3])
    recorded = _run(STAGE, None)  # what record-runs logs for a stage DVC skipped
    curves, used = read_mlflow("ci", CURVE_METRICS, store)
    assert curves[SYSTEM].run_id == trained != recorded
    assert curves[SYSTEM].frame[KEY].tolist() == [0.1, 0.2, 0.3]
    assert [r.run_id for r in used] == [trained]


def test_the_newest_run_with_curves_wins(store):
    _run(STAGE, [0.1, 0.2])
    retrained = _run(STAGE, [0.5, 0.6])
    _run(STAGE, None)
    curves, _ = read_mlflow("ci", CURVE_METRICS, store)
    assert curves[SYSTEM].run_id == retrained
    assert curves[SYSTEM].frame[KEY].tolist() == [0.5, 0.6]
