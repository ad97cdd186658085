"""However a stage's run goes, it makes the bytes an uninterrupted quiet run makes (ci profile,
real engine, real retriever, stages as processes):

- a training stage SIGKILLed after its first checkpoint and run again ends with the same weights,
  in Stage I (`train@c_mas_rl`) and in Stage II (`train@multiagent_opd`, its Teacher's cache
  carried over);
- the same stage beside a CPU-bound process on every core gives the same weights;
- started with OMP_NUM_THREADS=1 and MKL_NUM_THREADS=1, it computes with the profile's threads
  (its stage record says so) and gives the same weights;
- an evaluation killed after some shards and run again writes the same records, whether the
  kill fell between blocks or inside one.

The training runs take dev evaluations at every step, so each checkpoint follows one: the
policy's prefix cache and the retriever's memory are warm there, as they are at the tiny
profile's checkpoint after its dev evaluation.
"""

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

from pipeline.config import load_params, workflow_config
from pipeline.policy.hf_backend import save_hf_folder
from pipeline.stages import STAGES
from pipeline.tracking.stage_record import read_record
from tests.conftest import REPO_ROOT
from tests.test_rl_trainer import tiny_model, tiny_tokenizer
from tests.test_stage_resume import _finish, _weights

pytestmark = pytest.mark.slow
STEPS = 3
# the tiny profile's width and depth: a narrower model's matmuls happen to give every row the same
# floats whatever its batch, and a resume that loses state would go unnoticed
MODEL = {"hidden": 192, "layers": 3}


def _params(path: Path) -> Path:
    """The ci profile with short training runs that evaluate on dev at every step."""
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["profile"] = "ci"
    train = raw["ci"]["train"]
    for system in ("c_mas_rl", "multiagent_opd"):
        train["systems"][system]["steps"] = STEPS
    train["shared"].update(questions_per_batch=2, trajectories_per_question=2, dev_questions=4, eval_every=1,
                           checkpoint_every=1, audit_every=1)
    train["shared"]["rollout"].update(leader_max_new_tokens=16, searcher_max_new_tokens=16,
                                      answerer_max_new_tokens=8, max_searcher_turns=1)
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> Path:
    """splits, corpus and index of the ci profile, a random base model and a random Teacher,
    and the shared Stage-II start."""
    root = tmp_path_factory.mktemp("exact_resume") / "prepared"
    root.mkdir()
    params_file = _params(root / "params.yaml")
    mp = pytest.MonkeyPatch()
    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    try:
        params = load_params(params_file, profile="ci")
        for stage in ("splits", "corpus", "index"):
            STAGES[stage](params, root)
        tokenizer = tiny_tokenizer()
        save_hf_folder(tiny_model(tokenizer, 0, **MODEL), tokenizer, root / "data" / "models" / "base")
        save_hf_folder(tiny_model(tokenizer, 1, **MODEL), tokenizer, root / "data" / "models" / "c_mas_rl")
        STAGES["stage2_start"](params, root)
    finally:
        mp.undo()
    return root


def _copy(prepared: Path, name: str) -> Path:
    root = prepared.parent / name
    shutil.copytree(prepared / "data", root / "data")
    shutil.rmtree(root / "data" / "runs", ignore_errors=True)
    return root


def _start(root: Path, prepared: Path, system: str, **env: str) -> subprocess.Popen:
    environ = {**os.environ, "PYTHONPATH": str(REPO_ROOT), "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}",
               **env}
    return subprocess.Popen(
        [sys.executable, "-m", "pipeline", "--params", str(prepared / "params.yaml"), "--root", str(root),
         "run", "train", system],
        cwd=REPO_ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _differing(a: dict[str, torch.Tensor], b: dict[str, torch.Tensor]) -> list[str]:
    assert a.keys() == b.keys()
    return [k for k in a if not torch.equal(a[k], b[k])]


def _audit(root: Path, system: str) -> dict[str, bytes]:
    """The step tables as they entered the loss (pipeline.rl.audit), rollout log-probs included:
    they catch a rollout computed with other floats even where the update happens not to move
    the weights (a random model whose rewards all tie)."""
    folder = root / "data" / "audit" / system
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.glob("step-*/*.parquet"))}


def _same_run(reference: Path, root: Path, system: str) -> None:
    assert _differing(_weights(reference, system), _weights(root, system)) == []
    expected, got = _audit(reference, system), _audit(root, system)
    assert len(expected) == 2 * STEPS and expected.keys() == got.keys()
    assert [name for name in expected if expected[name] != got[name]] == []


@pytest.fixture(scope="module")
def uninterrupted(prepared) -> dict[str, Path]:
    """Each system trained once, quietly, start to end: its root."""
    out = {}
    for system in ("c_mas_rl", "multiagent_opd"):
        root = _copy(prepared, f"uninterrupted-{system}")
        shutil.rmtree(root / "data" / "models" / system, ignore_errors=True)
        _finish(_start(root, prepared, system))
        out[system] = root
    return out


def _killed_then_resumed(prepared: Path, system: str) -> Path:
    root = _copy(prepared, f"killed-{system}")
    shutil.rmtree(root / "data" / "models" / system, ignore_errors=True)
    proc = _start(root, prepared, system)
    first = root / "data" / "checkpoints" / system / "step-0001"  # appears complete (atomic_dir)
    deadline = time.monotonic() + 600
    while not first.is_dir():
        assert proc.poll() is None, f"the stage ended before its first checkpoint: {proc.stderr.read()[-3000:]}"
        assert time.monotonic() < deadline, "no checkpoint after 600 s"
        time.sleep(0.02)
    proc.kill()
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    assert not (root / "data" / "models" / system).exists(), "the stage finished before the kill"
    out = _finish(_start(root, prepared, system))
    assert '"resumed_from": 1' in out or '"resumed_from": 2' in out, out[-2000:]
    return root


@pytest.mark.parametrize("system", ["c_mas_rl", "multiagent_opd"])
def test_a_sigkilled_training_resumes_to_the_same_weights(prepared, uninterrupted, system):
    _same_run(uninterrupted[system], _killed_then_resumed(prepared, system), system)


def test_a_crowded_training_makes_the_same_weights(prepared, uninterrupted):
    """Stage II, whose Teacher-scored advantages move the weights at every step (the random
    Teacher's rewards tie, so in Stage I only the rollouts could show a difference)."""
    root = _copy(prepared, "crowded")
    shutil.rmtree(root / "data" / "models" / "multiagent_opd", ignore_errors=True)
    hogs = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 2)]
    try:
        _finish(_start(root, prepared, "multiagent_opd"))
    finally:
        for hog in hogs:
            hog.kill()
            hog.wait()
    _same_run(uninterrupted["multiagent_opd"], root, "multiagent_opd")


def test_the_shell_cannot_change_a_stages_threads(prepared, uninterrupted):
    root = _copy(prepared, "one-thread")
    shutil.rmtree(root / "data" / "models" / "multiagent_opd", ignore_errors=True)
    _finish(_start(root, prepared, "multiagent_opd", OMP_NUM_THREADS="1", MKL_NUM_THREADS="1"))
    profile_threads = load_params(prepared / "params.yaml", profile="ci").threads
    assert profile_threads > 1  # else the check below could not fail
    assert read_record(root, "train@multiagent_opd").threads == str(profile_threads)
    _same_run(uninterrupted["multiagent_opd"], root, "multiagent_opd")


class Killed(BaseException):
    """Stands for a kill: nothing in the stage catches it."""


def _evaluate(prepared: Path, out: Path, kill_after: int | None = None) -> pd.DataFrame:
    """The base model's hierarchy evaluation on the ci test split, with a backend and a retriever
    opened afresh (as a new process would); `kill_after` shards written, it dies."""
    from pipeline.eval.run import evaluate_system
    from pipeline.stage_io.inputs import open_eval_backend, open_retriever, read_split

    params = load_params(prepared / "params.yaml", profile="ci")
    written = []

    def on_shard(index: int, records: pd.DataFrame) -> None:
        written.append(index)
        if len(written) == kill_after:
            raise Killed()

    backend = open_eval_backend(prepared / "data" / "models" / "base", params.engine)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    result = evaluate_system(read_split(prepared, "test"), backend, open_retriever(prepared), cfg,
                             params.common.eval.runs, params.eval.shard_questions, out, params.eval.seed,
                             system="h_mas_base", workflow="hierarchy", on_shard=on_shard, progress=False,
                             block_shards=params.eval.block_shards)
    return result.records


@pytest.mark.parametrize("kill_after", [1, 2], ids=["inside-a-block", "between-blocks"])
def test_a_killed_evaluation_resumes_to_the_same_records(prepared, tmp_path, kill_after):
    params = load_params(prepared / "params.yaml", profile="ci")
    shards = -(-len(pd.read_parquet(prepared / "data" / "splits" / "test.parquet")) // params.eval.shard_questions)
    assert params.eval.block_shards == 2 and shards > params.eval.block_shards  # two blocks at least
    reference = _evaluate(prepared, tmp_path / "clean")
    with pytest.raises(Killed):
        _evaluate(prepared, tmp_path / "run", kill_after=kill_after)
    assert len(list((tmp_path / "run" / "shards").glob("shard-*.parquet"))) == kill_after
    resumed = _evaluate(prepared, tmp_path / "run")
    pd.testing.assert_frame_equal(resumed, reference)
    assert (tmp_path / "run" / "records.parquet").read_bytes() == (tmp_path / "clean" / "records.parquet").read_bytes()
