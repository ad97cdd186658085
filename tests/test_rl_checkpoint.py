"""pipeline.rl.checkpoint: a damaged newest checkpoint falls back to an older readable one with
a warning naming it; states load with weights_only (no pickled code runs); the RNG states, the
metric history and the caller's meta come back; leftovers of a cut write are cleaned."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch

from pipeline.rl.checkpoint import STATE_FILE, list_checkpoints, load_latest, save_checkpoint, step_dir
from tests.test_rl_trainer import tiny_model, tiny_tokenizer

FP = "run-fingerprint"


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


def _model_and_optimizer(tokenizer, seed: int = 0):
    model = tiny_model(tokenizer, seed, hidden=16, layers=1)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    loss = sum(p.sum() for p in model.parameters())
    loss.backward()
    optimizer.step()
    return model, optimizer


def _save_two(root: Path, tokenizer) -> dict[int, dict[str, torch.Tensor]]:
    """Checkpoints after steps 1 and 2 of a toy run; returns the weights of each."""
    model, optimizer = _model_and_optimizer(tokenizer)
    weights = {}
    for step in (1, 2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.5)
        weights[step] = {k: v.clone() for k, v in model.state_dict().items()}
        save_checkpoint(root, step, model, tokenizer, optimizer, FP, history=[{"step": s, "x": float(s)}
                        for s in range(step)], meta={"mlflow_run_id": f"run-{step}"})
    return weights


def _load(root: Path, tokenizer):
    model, optimizer = _model_and_optimizer(tokenizer, seed=5)
    return model, load_latest(root, model, optimizer, FP)


def _same(model, weights) -> bool:
    return all(torch.equal(v, weights[k]) for k, v in model.state_dict().items())


def test_the_newest_checkpoint_resumes_with_its_history_and_meta(tmp_path, tokenizer):
    weights = _save_two(tmp_path, tokenizer)
    model, found = _load(tmp_path, tokenizer)
    assert found.step == 2 and _same(model, weights[2])
    assert found.history == [{"step": 0, "x": 0.0}, {"step": 1, "x": 1.0}]
    assert found.meta == {"mlflow_run_id": "run-2"}


@pytest.mark.parametrize("damage", ["truncated state", "flipped state byte", "truncated weights", "empty meta"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_previous_one(tmp_path, tokenizer, caplog, damage):
    weights = _save_two(tmp_path, tokenizer)
    newest = step_dir(tmp_path, 2)
    target = {"truncated state": STATE_FILE, "flipped state byte": STATE_FILE,
              "truncated weights": "model.safetensors", "empty meta": "checkpoint.json"}[damage]
    data = bytearray((newest / target).read_bytes())
    if damage == "flipped state byte":
        data[len(data) // 3] ^= 0xFF
    elif damage == "empty meta":
        data = bytearray()
    else:
        data = data[: len(data) // 2]
    (newest / target).write_bytes(bytes(data))
    with caplog.at_level("WARNING", logger="pipeline.rl.checkpoint"):
        model, found = _load(tmp_path, tokenizer)
    assert found.step == 1 and _same(model, weights[1])
    assert str(newest) in caplog.text and "unreadable checkpoint" in caplog.text


def test_states_load_with_weights_only_so_no_pickled_code_runs(tmp_path, tokenizer, caplog):
    _save_two(tmp_path, tokenizer)
    marker = tmp_path / "code-ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    newest = step_dir(tmp_path, 2)
    state = torch.load(newest / STATE_FILE, weights_only=True)
    state["payload"] = Payload()
    torch.save(state, newest / STATE_FILE)
    with caplog.at_level("WARNING", logger="pipeline.rl.checkpoint"):
        _, found = _load(tmp_path, tokenizer)
    assert not marker.exists()
    assert found.step == 1 and str(newest) in caplog.text


def test_rng_states_come_back(tmp_path, tokenizer):
    model, optimizer = _model_and_optimizer(tokenizer)
    torch.manual_seed(3), np.random.seed(4), random.seed(5)
    np.random.normal()  # a cached gaussian in numpy's state
    save_checkpoint(tmp_path, 1, model, tokenizer, optimizer, FP)
    expected = (torch.rand(3), np.random.rand(3), np.random.normal(), random.random())
    torch.manual_seed(0), np.random.seed(0), random.seed(0)
    _load(tmp_path, tokenizer)
    got = (torch.rand(3), np.random.rand(3), np.random.normal(), random.random())
    assert torch.equal(got[0], expected[0]) and np.array_equal(got[1], expected[1]) and got[2:] == expected[2:]


def test_an_older_format_or_another_run_is_not_resumed(tmp_path, tokenizer, caplog):
    _save_two(tmp_path, tokenizer)
    (step_dir(tmp_path, 2) / "checkpoint.json").unlink()  # format 1 had only trainer_state.pt
    record = json.loads((step_dir(tmp_path, 1) / "checkpoint.json").read_text())
    (step_dir(tmp_path, 1) / "checkpoint.json").write_text(json.dumps({**record, "fingerprint": "other"}))
    with caplog.at_level("WARNING", logger="pipeline.rl.checkpoint"):
        _, found = _load(tmp_path, tokenizer)
    assert found is None
    assert "older checkpoint format" in caplog.text


def test_leftovers_of_a_cut_swap_are_cleaned(tmp_path, tokenizer):
    weights = _save_two(tmp_path, tokenizer)
    # killed between the two renames of a rewrite of step-0002: the complete old folder is aside
    step_dir(tmp_path, 2).rename(tmp_path / ".step-0002.old")
    (tmp_path / ".step-0002.k3j9x0ab.tmp").mkdir()  # the new one, cut before its rename
    (tmp_path / ".step-0003.0123abcd.tmp").mkdir()
    model, found = _load(tmp_path, tokenizer)
    assert found.step == 2 and _same(model, weights[2])
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step-0001", "step-0002"]
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1, 2]
