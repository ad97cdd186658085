"""A training stage killed with SIGKILL after a checkpoint resumes from it and, on CPU with the
same seed, ends with bitwise the same weights as an uninterrupted run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from pipeline.policy.hf_backend import HFBackend, save_hf_folder
from pipeline.rl.trainer import TrainInputs, TrainResult, train
from tests.helpers.fakes import FakeRetriever
from tests.test_rl_trainer import ScriptedHFBackend, questions, tiny_config, tiny_model, tiny_tokenizer

REPO = Path(__file__).resolve().parents[1]
STEPS = 4


def run_training(workdir: Path, sleep_at: int | None = None, seed: int = 7) -> tuple[torch.nn.Module, TrainResult]:
    """Train opd for STEPS steps from workdir/base with Teacher workdir/teacher, checkpoints in
    workdir/ckpt. `sleep_at`: hang after logging that step's training metrics (to be killed)."""
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    loaded = HFBackend(workdir.parent / "base")
    policy = ScriptedHFBackend(loaded.model, loaded.tokenizer)
    inputs = TrainInputs(
        policy=policy, retriever=FakeRetriever(), train_questions=questions(5), dev_questions=questions(2, "d"),
        teacher=HFBackend(workdir.parent / "teacher"), checkpoint_dir=workdir / "ckpt",
    )
    cfg = tiny_config("multiagent_opd", steps=STEPS, seed=seed, checkpoint_every=2, eval_every=100, audit_every=100)

    def log_fn(step: int, metrics: dict) -> None:
        if sleep_at is not None and step == sleep_at and "pg_loss" in metrics:
            time.sleep(600)

    result = train(cfg, inputs, log_fn=log_fn)
    return policy.model, result


@pytest.fixture(scope="module")
def models(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("resume")
    tokenizer = tiny_tokenizer()
    save_hf_folder(tiny_model(tokenizer, 0), tokenizer, root / "base")
    save_hf_folder(tiny_model(tokenizer, 1), tokenizer, root / "teacher")
    return root


def test_sigkill_then_resume_matches_an_uninterrupted_run(models):
    threads = torch.get_num_threads()
    try:
        reference, ref_result = run_training(models / "uninterrupted")
        assert ref_result.resumed_from == 0

        killed = models / "killed"
        child = subprocess.Popen(
            [sys.executable, "-c",
             "import sys; from pathlib import Path; from tests.test_rl_resume import run_training; "
             "run_training(Path(sys.argv[1]), sleep_at=2)", str(killed)],
            cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )
        marker = killed / "ckpt" / "step-0002" / "trainer_state.pt"
        deadline = time.monotonic() + 180
        while not marker.is_file():
            if child.poll() is not None:
                pytest.fail(f"training child exited early ({child.returncode}): {child.stderr.read().decode()[-2000:]}")
            if time.monotonic() > deadline:
                child.kill()
                pytest.fail("no checkpoint after 180 s")
            time.sleep(0.2)
        time.sleep(0.5)  # it is now hanging in step 2's log call, past the checkpoint
        os.kill(child.pid, signal.SIGKILL)
        assert child.wait(timeout=30) == -signal.SIGKILL
        assert not (killed / "ckpt" / f"step-{STEPS:04d}").exists()

        resumed, result = run_training(killed)
        assert result.resumed_from == 2
        ref_state, new_state = reference.state_dict(), resumed.state_dict()
        assert ref_state.keys() == new_state.keys()
        different = [k for k in ref_state if not torch.equal(ref_state[k], new_state[k])]
        assert different == []

        # a checkpoint of a run with other numbers (here the seed) is never resumed
        _, other = run_training(killed, seed=8)
        assert other.resumed_from == 0
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(False)


def test_inputs_fingerprint_changes_with_weights_and_questions(tmp_path):
    """A checkpoint is resumed only by a run from the same weights and the same questions."""
    from pipeline.rl.checkpoint import inputs_fingerprint

    base = tmp_path / "base"
    base.mkdir()
    (base / "config.json").write_text("{}")
    (base / "model.safetensors").write_bytes(b"\x00" * 64)
    ids = [["q1", "q2"], ["d1"]]
    first = inputs_fingerprint([base], ids)
    assert inputs_fingerprint([base], ids) == first
    assert inputs_fingerprint([base], [["q1", "q3"], ["d1"]]) != first
    (base / "model.safetensors").write_bytes(b"\x01" + b"\x00" * 63)  # a retrained base model
    retrained = inputs_fingerprint([base], ids)
    assert retrained != first
    ref = tmp_path / "ref"
    ref.mkdir()
    (ref / "model_ref.json").write_text('{"sha256": "abc"}')
    assert inputs_fingerprint([ref], ids) != inputs_fingerprint([base], ids)
