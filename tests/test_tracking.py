"""pipeline.tracking.runs: the batched training-curve logger and the life of a stage's MLflow run
(FAILED on an exception, KILLED on SIGTERM or when its process is found dead, continued by a
resumed stage)."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys

import mlflow
import pytest

from pipeline.tracking.runs import REPO_ROOT, CurveLogger, process_started, stage_run


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


# ---------------------------------------------------------------- the run lifecycle

HOLD_A_RUN = """
import sys, time
from pathlib import Path
from pipeline.tracking.runs import stage_run
with stage_run("teacher", "ci", {"lr": 0.1}, root=Path(sys.argv[1])) as mlf:
    mlf.log_metric("loss", 1.0, step=0)
    print(mlf.active_run().info.run_id, flush=True)
    time.sleep(600)
"""


def _client(tmp_path):
    return mlflow.tracking.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")


def _hold_a_run(tmp_path, repo_root) -> tuple[subprocess.Popen, str]:
    """A child process inside stage_run; returns it and its run id once the run is open."""
    env = {**os.environ, "PYTHONPATH": str(repo_root), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path / 'mlflow.db'}"}
    child = subprocess.Popen([sys.executable, "-c", HOLD_A_RUN, str(tmp_path)], cwd=repo_root, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    run_id = child.stdout.readline().strip()
    assert run_id, child.stderr.read()[-3000:]
    return child, run_id


def test_a_failing_stage_ends_its_run_failed(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with pytest.raises(ValueError, match="bad row"):
        with stage_run("splits", "ci", root=tmp_path) as mlf:
            run_id = mlf.active_run().info.run_id
            raise ValueError("bad row")
    run = _client(tmp_path).get_run(run_id)
    assert run.info.status == "FAILED" and run.data.tags["end_reason"] == "ValueError: bad row"


def test_sigterm_ends_the_run_killed_and_exits_143(tmp_path, repo_root):
    child, run_id = _hold_a_run(tmp_path, repo_root)
    child.send_signal(signal.SIGTERM)
    assert child.wait(timeout=60) == 143
    run = _client(tmp_path).get_run(run_id)
    assert run.info.status == "KILLED" and run.data.tags["end_reason"] == "SIGTERM"


def test_a_run_whose_process_was_sigkilled_is_marked_killed_at_the_next_start(tmp_path, repo_root, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    child, dead_id = _hold_a_run(tmp_path, repo_root)
    client = _client(tmp_path)
    child.kill()
    child.wait(timeout=60)
    assert client.get_run(dead_id).info.status == "RUNNING"  # nothing could end it
    experiment = client.get_run(dead_id).info.experiment_id
    me = {"pid": str(os.getpid()), "pid_started": process_started(os.getpid())}
    live = client.create_run(experiment, tags={"host": socket.gethostname(), **me}).info.run_id
    elsewhere = client.create_run(experiment, tags={"host": "another-machine", "pid": "1"}).info.run_id
    with stage_run("splits", "ci", root=tmp_path):
        pass
    assert client.get_run(live).info.status == "RUNNING"  # its process (this one) still runs
    assert client.get_run(elsewhere).info.status == "RUNNING"  # another host's: cannot be seen from here
    dead = client.get_run(dead_id)
    assert dead.info.status == "KILLED" and "was gone" in dead.data.tags["end_reason"]
    last_metric = client.get_metric_history(dead_id, "loss")[0].timestamp
    assert dead.info.end_time == last_metric  # when it was last seen alive, not when found dead


def test_a_resumed_stage_continues_its_run_with_its_metrics(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    client = _client(tmp_path)
    with pytest.raises(RuntimeError):
        with stage_run("teacher", "ci", {"steps": 2, "lr": 0.1}, root=tmp_path) as mlf:
            run_id = mlf.active_run().info.run_id
            mlf.log_metric("dev_em", 0.1, step=0)
            raise RuntimeError("died")
    with stage_run("teacher", "ci", {"steps": 4, "lr": 0.1}, root=tmp_path, resume_run_id=run_id) as mlf:
        assert mlf.active_run().info.run_id == run_id
        mlf.log_metric("dev_em", 0.3, step=2)
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["attempt"] == "2"
    assert "end_reason" not in run.data.tags and run.data.tags["attempt_1_end"] == "RuntimeError: died"
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "dev_em")] == [(0, 0.1), (2, 0.3)]
    assert run.data.params == {"steps": "2", "lr": "0.1"}  # MLflow keeps params; the change is a tag
    assert run.data.tags["params_changed"] == "steps: 2 -> 4"
    assert len(client.search_runs([run.info.experiment_id])) == 1


def test_a_run_lost_with_its_store_is_replaced_by_a_new_one(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with caplog.at_level("WARNING", logger="pipeline.tracking.runs"):
        with stage_run("teacher", "ci", root=tmp_path, resume_run_id="0123456789abcdef0123456789abcdef") as mlf:
            new_id = mlf.active_run().info.run_id
    assert new_id != "0123456789abcdef0123456789abcdef"
    assert "0123456789abcdef0123456789abcdef" in caplog.text and "not in the store" in caplog.text
    assert _client(tmp_path).get_run(new_id).data.tags["attempt"] == "1"


def test_curve_logger_restores_only_the_points_the_run_lacks(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    history = [{"step": 0, "dev_em": 0.1}, {"step": 0, "pg_loss": 0.5}, {"step": 1, "pg_loss": 0.4},
               {"step": 2, "dev_em": 0.2}]
    with stage_run("teacher", "ci", root=tmp_path) as mlf:
        run_id = mlf.active_run().info.run_id
        curve = CurveLogger(mlf, every=None)
        for point in history[:2]:
            curve(point["step"], {k: v for k, v in point.items() if k != "step"})
        assert _client(tmp_path).get_metric_history(run_id, "dev_em") == []  # held until flushed
        curve.flush()
        assert curve.restore(history) == 2
        assert curve.restore(history) == 0
    client = _client(tmp_path)
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "dev_em")) == [(0, 0.1), (2, 0.2)]
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "pg_loss")) == [(0, 0.5), (1, 0.4)]


def test_every_stage_run_carries_its_draw_as_tags(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    (tmp_path / "configs").mkdir()
    shutil.copy(REPO_ROOT / "configs/seed_sets.yaml", tmp_path / "configs/seed_sets.yaml")
    shutil.copy(REPO_ROOT / "params.yaml", tmp_path / "params.yaml")
    with stage_run("splits", "tiny", root=tmp_path) as mlf:
        run_id = mlf.active_run().info.run_id
    tags = _client(tmp_path).get_run(run_id).data.tags
    assert tags["draw.seed_set"] == "A"
    assert tags["draw.precision"] in {"bf16", "float32"}
    assert tags["draw.cpu"] not in ("", "unknown")
