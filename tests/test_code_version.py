"""The pipeline's source hash, and resumable work (a training checkpoint, an evaluation shard)
that is not resumed under other code."""

from __future__ import annotations

import shutil

import pytest

from pipeline.code_version import PACKAGE, code_version, source_hash
from pipeline.eval import run
from pipeline.rl import trainer
from tests.test_eval_run import _evaluate
from tests.test_rl_trainer import tiny_tokenizer
from tests.test_stage_resume import Killed, _run_team, _scripted_team_root


def test_the_hash_follows_code_and_prompts_only(tmp_path):
    package = shutil.copytree(PACKAGE, tmp_path / "pipeline", ignore=shutil.ignore_patterns("__pycache__"))
    start = source_hash(package)
    assert start == code_version()  # the copy hashes as the package does
    (package / "__pycache__").mkdir()
    (package / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"compiled")
    (package / "notes.txt").write_text("not code")
    assert source_hash(package) == start
    prompts = package / "agents" / "prompts.yaml"
    prompts.write_text(prompts.read_text() + "\n# an edited prompt file\n")
    edited = source_hash(package)
    assert edited != start
    (package / "io.py").write_text((package / "io.py").read_text() + "\n")
    assert source_hash(package) not in (start, edited)


def test_a_checkpoint_of_other_code_is_not_resumed(tmp_path, monkeypatch, torch_one_thread):
    root = _scripted_team_root(tmp_path / "killed", tiny_tokenizer())
    with pytest.raises(Killed):
        _run_team(root, monkeypatch, die_after_checkpoint=1)
    assert (root / "data" / "checkpoints" / "multiagent_opd" / "step-0001").is_dir()
    monkeypatch.undo()  # drop the first run's dying trainer
    monkeypatch.setattr(trainer, "code_version", lambda: "another-code")
    # (without the code in the fingerprint this run resumes from step 1, as test_stage_resume shows)
    summary = _run_team(root, monkeypatch)
    assert summary["resumed_from"] == 0, summary


def test_shards_of_other_code_are_recomputed(tmp_path, monkeypatch):
    assert _evaluate(tmp_path, n=6, shard=2).computed == 3
    assert _evaluate(tmp_path, n=6, shard=2).reused == 3
    monkeypatch.setattr(run, "code_version", lambda: "another-code")
    again = _evaluate(tmp_path, n=6, shard=2)
    assert (again.computed, again.reused) == (3, 0)
