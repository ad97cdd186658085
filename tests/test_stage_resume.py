"""A training stage interrupted part-way and started again ends as an uninterrupted run does:
the same final weights, one MLflow run (the same run id, FINISHED, named by the stage's record)
whose metric history holds every step once with the same values, and the same curves file
(data/curves/<system>.csv, what the report draws), byte for byte, holding that history.

In process (fast): the `train@multiagent_opd` stage on scripted backends dies between a checkpoint and the
moment its metrics reach MLflow. As a process (slow): `python -m pipeline run train c_mas_rl` on a
small ci set-up is killed with SIGKILL after its first checkpoint."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient
from safetensors.torch import load_file

from pipeline.config import load_params
from pipeline.policy.hf_backend import HFBackend, save_hf_folder
from pipeline.report.curves import CURVE_METRICS, read_stage_curves, stage_curves_path
from pipeline.stages import STAGES
from pipeline.tracking.stage_record import read_record
from tests.conftest import REPO_ROOT
from tests.helpers.fakes import FakeRetriever
from tests.test_rl_trainer import ScriptedHFBackend, questions, tiny_model, tiny_tokenizer

STEPS = 2
TEAM_STAGE = "train@multiagent_opd"
TIMING_METRICS = {"tokens_per_second", "step_seconds", "train_seconds", "resumed_from"}


def _small_ci_params(path: Path) -> Path:
    """params.yaml with the ci profile active and its Teacher run shrunk to a few short steps."""
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["profile"] = "ci"
    train = raw["ci"]["train"]
    train["systems"]["c_mas_rl"]["steps"] = STEPS
    train["shared"].update(questions_per_batch=1, trajectories_per_question=2, dev_questions=2, eval_every=2,
                           checkpoint_every=1, audit_every=100)
    train["shared"]["rollout"].update(leader_max_new_tokens=12, searcher_max_new_tokens=12,
                                      answerer_max_new_tokens=8, max_searcher_turns=1)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """splits, corpus and index of the ci profile, and a random tiny base model."""
    root = tmp_path_factory.mktemp("stage_resume") / "prepared"
    root.mkdir()
    params_file = _small_ci_params(root / "params.yaml")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    try:
        params = load_params(params_file, profile="ci")
        for stage in ("splits", "corpus", "index"):
            STAGES[stage](params, root)
    finally:
        mp.undo()
    tokenizer = tiny_tokenizer()
    save_hf_folder(tiny_model(tokenizer), tokenizer, root / "data" / "models" / "base")
    return root


def _copy(prepared: Path, name: str) -> Path:
    root = prepared.parent / name
    shutil.copytree(prepared / "data", root / "data")
    return root


def _teacher(root: Path, prepared: Path) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "--params", str(prepared / "params.yaml"), "--root", str(root),
         "run", "train", "c_mas_rl"],
        cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _finish(proc: subprocess.Popen) -> str:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-4000:]
    return out


def _runs(root: Path, stage: str = "train@c_mas_rl") -> list:
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("multiagent-opd-ci")
    return client.search_runs([experiment.experiment_id], f"tags.stage = '{stage}'")


def _history(root: Path, run) -> dict[str, list[tuple[int, float]]]:
    client = MlflowClient(f"sqlite:///{root / 'mlflow.db'}")
    return {key: sorted((m.step, m.value) for m in client.get_metric_history(run.info.run_id, key))
            for key in run.data.metrics}


def _same_curves_file(clean: Path, resumed: Path, system: str, history: dict) -> pd.DataFrame:
    """The curves file of the resumed stage equals the uninterrupted one's byte for byte and holds
    the points of the resumed run's metric history (`history`, by key) of every curve metric;
    returns its frame."""
    path = stage_curves_path(resumed, system)
    assert path.read_bytes() == stage_curves_path(clean, system).read_bytes()
    curve = read_stage_curves(path, system)
    assert curve.frame["step"].is_unique
    for metric in CURVE_METRICS:
        points = [(int(s), float(v)) for s, v in curve.points(metric.key).itertuples(index=False)]
        assert points == history.get(metric.key, []), metric.key
    return curve.frame


def _recorded_run(root: Path, stage: str, run) -> None:
    """The stage's record (data/runs/...) names the run that finished it."""
    record = read_record(root, stage)
    assert record is not None and record.run_id == run.info.run_id and record.stage == stage


def _weights(root: Path, weights: str = "c_mas_rl") -> dict[str, torch.Tensor]:
    return load_file(root / "data" / "models" / weights / "model.safetensors")


class Killed(BaseException):
    """Stands for a kill: nothing in the stage catches it."""


def _scripted_team_root(root: Path, tokenizer) -> Path:
    save_hf_folder(tiny_model(tokenizer, 0), tokenizer, root / "data" / "models" / "base")
    save_hf_folder(tiny_model(tokenizer, 1), tokenizer, root / "data" / "models" / "c_mas_rl")
    (root / "data" / "splits").mkdir(parents=True)
    questions(6).to_parquet(root / "data" / "splits" / "train.parquet")
    questions(3, "d").to_parquet(root / "data" / "splits" / "dev.parquet")
    return root


def _run_team(root: Path, monkeypatch, die_after_checkpoint: int | None = None) -> dict:
    from pipeline.stages import stage2_start
    from pipeline.stages import train as train_stages

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    monkeypatch.setattr(train_stages, "open_retriever", lambda root: FakeRetriever())

    def scripted(path, engine=None):
        loaded = HFBackend(path)
        return ScriptedHFBackend(loaded.model, loaded.tokenizer)

    def train(cfg, inputs, log_fn=None, on_checkpoint=None):
        def checkpointed(step: int) -> None:
            if step == die_after_checkpoint:
                raise Killed()  # after the checkpoint is on disk, before its metrics reach MLflow
            on_checkpoint(step)
        return real_train(cfg, inputs, log_fn, checkpointed)

    real_train = train_stages.train
    monkeypatch.setattr(train_stages, "open_policy", scripted)
    monkeypatch.setattr(train_stages, "train", train)
    monkeypatch.setattr(stage2_start, "open_retriever", lambda root: FakeRetriever())
    monkeypatch.setattr(stage2_start, "open_policy", scripted)
    params = load_params(REPO_ROOT / "params.yaml", "ci")
    if not (root / "data" / "stage2_start").is_dir():
        STAGES["stage2_start"](params, root)
    return STAGES["train"](params, root, "multiagent_opd")


def test_an_interrupted_training_stage_continues_its_run(tmp_path, monkeypatch, torch_one_thread):
    tokenizer = tiny_tokenizer()
    clean = _scripted_team_root(tmp_path / "clean", tokenizer)
    killed = _scripted_team_root(tmp_path / "killed", tokenizer)
    steps = load_params(REPO_ROOT / "params.yaml", "ci").train.systems.multiagent_opd.steps
    assert steps >= 2
    _run_team(clean, monkeypatch)
    with pytest.raises(Killed):
        _run_team(killed, monkeypatch, die_after_checkpoint=1)
    (dead,) = _runs(killed, TEAM_STAGE)
    assert dead.info.status == "FAILED" and "pg_loss" not in dead.data.metrics  # step 0's metrics never sent
    assert read_record(killed, TEAM_STAGE) is None  # a run that did not finish names no outputs
    summary = _run_team(killed, monkeypatch)
    assert summary["resumed_from"] == 1

    (clean_run,), (run,) = _runs(clean, TEAM_STAGE), _runs(killed, TEAM_STAGE)
    assert run.info.run_id == dead.info.run_id and run.info.status == "FINISHED"
    expected, got = _history(clean, clean_run), _history(killed, run)
    assert expected.keys() == got.keys()
    for key in expected:
        if key in TIMING_METRICS:
            assert [s for s, _ in got[key]] == [s for s, _ in expected[key]], key
        else:
            assert got[key] == expected[key], key
    assert [s for s, _ in got["pg_loss"]] == list(range(steps))
    frame = _same_curves_file(clean, killed, "multiagent_opd", got)
    assert "dev_em" in frame and frame["step"].tolist()[0] == 0
    _recorded_run(killed, TEAM_STAGE, run)
    _recorded_run(clean, TEAM_STAGE, clean_run)
    reference, resumed = _weights(clean, "multiagent_opd"), _weights(killed, "multiagent_opd")
    assert [k for k in reference if not torch.equal(reference[k], resumed[k])] == []


@pytest.mark.slow
def test_sigkilled_training_stage_resumes_with_its_whole_history(prepared):
    clean = _copy(prepared, "uninterrupted")
    _finish(_teacher(clean, prepared))

    killed = _copy(prepared, "killed")
    proc = _teacher(killed, prepared)
    first_checkpoint = killed / "data" / "checkpoints" / "c_mas_rl" / "step-0001"  # appears complete (atomic_dir)
    deadline = time.monotonic() + 300
    while not first_checkpoint.is_dir():
        assert proc.poll() is None, f"the stage ended before its first checkpoint: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "no checkpoint after 300 s"
        time.sleep(0.02)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (killed / "data" / "models" / "c_mas_rl").exists(), "the stage finished before the kill"
    (dead_run,) = _runs(killed)
    assert dead_run.info.status == "RUNNING"  # nothing could end it

    out = _finish(_teacher(killed, prepared))
    assert '"resumed_from": 0' not in out

    reference, resumed = _weights(clean), _weights(killed)
    assert reference.keys() == resumed.keys()
    assert [k for k in reference if not torch.equal(reference[k], resumed[k])] == []

    (clean_run,) = _runs(clean)
    (run,) = _runs(killed)
    assert run.info.run_id == dead_run.info.run_id and run.info.status == "FINISHED"
    assert run.data.tags["attempt"] == "2"
    expected, got = _history(clean, clean_run), _history(killed, run)
    assert expected.keys() == got.keys()
    assert "dev_em" in got and [s for s, _ in got["dev_em"]] == [0, STEPS]
    for key in expected:
        steps = [s for s, _ in got[key]]
        assert len(steps) == len(set(steps)), f"{key}: a step logged twice: {steps}"
        if key in TIMING_METRICS:
            assert steps == [s for s, _ in expected[key]], key
        else:
            assert got[key] == expected[key], key
    assert [s for s, _ in got["pg_loss"]] == list(range(STEPS))

    system = run.data.tags["system"]
    frame = _same_curves_file(clean, killed, system, got)
    assert frame[["step", "dev_em"]].dropna()["step"].tolist() == [0, STEPS]
    _recorded_run(killed, "train@c_mas_rl", run)
