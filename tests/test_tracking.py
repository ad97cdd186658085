"""pipeline.tracking: the batched training-curve logger."""

from __future__ import annotations

import mlflow
import pytest

from pipeline.tracking import CurveLogger, stage_run


def test_curve_logger_sends_every_step_in_batches(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with stage_run("base_model", "ci", root=tmp_path) as mlf:
        client = mlflow.tracking.MlflowClient()  # after stage_run has pointed MLflow at this store
        run_id = mlf.active_run().info.run_id
        with CurveLogger(mlf, "sft", every=3) as curve:
            for step in range(1, 8):
                curve(step, {"loss": 1.0 / step, "lr": 0.1})
                sent = client.get_metric_history(run_id, "sft_loss")
                assert len(sent) == step - step % 3  # batches of 3 steps reach the store
        history = client.get_metric_history(run_id, "sft_loss")  # the rest on leaving the block
        assert sorted((m.step, m.value) for m in history) == [(s, 1.0 / s) for s in range(1, 8)]
        assert len(client.get_metric_history(run_id, "sft_lr")) == 7


def test_curve_logger_needs_an_active_run(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    curve = CurveLogger(mlflow, "pretrain", every=1)
    with pytest.raises(RuntimeError, match="no active MLflow run"):
        curve(1, {"loss": 1.0})
    with pytest.raises(ValueError, match="every"):
        CurveLogger(mlflow, "pretrain", every=0)
