"""Every number from its own run, end to end on the ci profile: a draw kept beside the committed
run, a killed or still-running run in the shared MLflow store, or no store at all change nothing
in the report but the across-draws rows the kept draw adds."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.checkout_copy import copy_checkout
from pipeline.draws.workspace import run_draw
from pipeline.tracking.stage_record import read_record

pytestmark = pytest.mark.slow

ACROSS = "Across draws"
# what keeping a draw is meant to change: its file, the forest plot, and the across-draws section
CHANGES_WITH_A_KEPT_DRAW = ("draws/", "figures/draws_forest.png", "paper.md", "paper.html")


def _env(work: Path) -> dict[str, str]:
    bin_dir = Path(sys.executable).parent
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "DVC_NO_ANALYTICS": "1"}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_ARTIFACT_ROOT", "MAOPD_GIT_COMMIT", "MAOPD_PROFILE"):
        env.pop(key, None)
    return env


def _run(args: list[str], work: Path) -> None:
    proc = subprocess.run(args, cwd=work, env=_env(work), capture_output=True, text=True)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-6000:]


def _dvc(work: Path, *args: str) -> None:
    _run([str(Path(sys.executable).parent / "dvc"), *args], work)


def _report(work: Path) -> None:
    _run([sys.executable, "-m", "pipeline", "run", "report"], work)


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _without_across_draws(name: str, data: bytes) -> str:
    text = data.decode()
    if name == "paper.md":
        return "".join(part for part in re.split(r"(?m)^(?=## )", text) if not part.startswith(f"## {ACROSS}"))
    return "".join(part for part in re.split(r"(?=<h2)", text) if not re.match(rf"<h2[^>]*>{ACROSS}", part))


def _assert_unchanged_but_the_draws(before: dict[str, bytes], after: dict[str, bytes]) -> None:
    kept = [n for n in before if not n.startswith(CHANGES_WITH_A_KEPT_DRAW)]
    assert [n for n in kept if before[n] != after.get(n)] == []
    for name in ("paper.md", "paper.html"):
        assert _without_across_draws(name, before[name]) == _without_across_draws(name, after[name]), name


@pytest.fixture(scope="module")
def work(tmp_path_factory) -> Path:
    """A ci checkout (a git repo, so that drawing from it works), built by `dvc repro`."""
    work = copy_checkout(tmp_path_factory.mktemp("sources") / "repo", profile="ci")
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "ci checkout"]):
        subprocess.run(["git", *args], cwd=work, check=True, capture_output=True,
                       env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
                            "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"})
    _dvc(work, "repro")
    return work


def test_a_draw_then_repro_changes_only_the_across_draws_rows(work, tmp_path, monkeypatch):
    folder = work / "reports" / "ci"
    before = _files(folder)
    links = {stage: read_record(work, stage).run_id for stage in ("train@multiagent_opd", "evaluate@c_mas_rl")}
    for key in ("MLFLOW_TRACKING_URI", "MLFLOW_ARTIFACT_ROOT"):
        monkeypatch.delenv(key, raising=False)  # the draw shares the checkout's store, as `make draw` does
    result = run_draw(work, "ci", None, "float32", workspace=tmp_path / "ws", keep=True, share_cache=False)
    assert result.kept is not None and result.kept.parent == folder / "draws"
    _dvc(work, "repro")

    after = _files(folder)
    assert set(after) - set(before) == {f"draws/{result.kept.name}"}
    _assert_unchanged_but_the_draws(before, after)
    assert result.kept.stem in after["paper.md"].decode().split(f"## {ACROSS}")[1]
    md = after["paper.md"].decode()
    for stage, run_id in links.items():  # the committed run's links still open its own runs
        assert read_record(work, stage).run_id == run_id and f"/maopd/run/{run_id})" in md
    draw_ids = {read_record(tmp_path / "ws", s).run_id for s in ("train@multiagent_opd", "evaluate@c_mas_rl")}
    assert not any(i in md for i in draw_ids)


def test_a_running_run_in_the_store_and_no_store_change_nothing(work):
    import mlflow
    from mlflow.tracking import MlflowClient

    folder = work / "reports" / "ci"
    _report(work)
    before = _files(folder)
    uri = f"sqlite:///{work / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("multiagent-opd-ci")
    for status in ("RUNNING", "KILLED"):  # a draw still training, and one killed mid-way
        run = client.create_run(experiment.experiment_id, run_name="train@multiagent_opd",
                                tags={"system": "multiagent_opd", "stage": "train@multiagent_opd"})
        for step in range(3):
            client.log_metric(run.info.run_id, "dev_em", 0.987, step=step)
            client.log_metric(run.info.run_id, "dev_searcher_kl", 0.5, step=step)
        if status == "KILLED":
            client.set_terminated(run.info.run_id, "KILLED")
    mlflow.set_tracking_uri(None)
    _report(work)
    assert _files(folder) == before

    (work / "mlflow.db").rename(work / "mlflow.db.aside")
    try:
        _report(work)
        assert _files(folder) == before
    finally:
        (work / "mlflow.db").unlink(missing_ok=True)
        (work / "mlflow.db.aside").rename(work / "mlflow.db")
