"""Prefect and DVC orchestration: the DAG walk, skipping, retries, deployments, the DVC remote
round trip (plain functions), and one flow run through Prefect (smoke)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest
import yaml
from prefect.client.schemas.schedules import CronSchedule

from flows.deploy import DEPLOYMENTS, deployments
from flows.draws import draws_flow
from flows.dvc_graph import pool_for, select, stage_graph, upstream_of, waves
from flows.stages import paper_flow, retry_if_transient
from flows.workspaces import (
    RunLayout,
    StageFailed,
    is_transient,
    merge_lock_entry,
    repro_status,
    run_stage,
)
from pipeline.checkout_copy import copy_checkout, dvc_executable
from pipeline.systems import SYSTEMS

from .conftest import REPO_ROOT


def _declared_stages() -> set[str]:
    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    names = set()
    for name, body in stages.items():
        if "foreach" in body:
            items = body["foreach"]
            names |= {f"{name}@{k}" for k in (items if isinstance(items, list) else list(items))}
        else:
            names.add(name)
    return names


@pytest.fixture(scope="module")
def graph() -> dict[str, list[str]]:
    return stage_graph(REPO_ROOT)


def test_stage_graph_covers_the_dag_in_dependency_order(graph):
    assert set(graph) == _declared_stages()
    order = list(graph)
    for stage, deps in graph.items():
        assert all(order.index(d) < order.index(stage) for d in deps), stage
    assert "splits" in graph["validate_splits"] and "train@c_mas_rl" in graph["train@multiagent_opd"]


def test_independent_stages_share_a_wave(graph):
    plan = waves(graph, list(graph))
    wave_of = {s: i for i, wave in enumerate(plan) for s in wave}
    assert wave_of["train@multiagent_opd"] == wave_of["train@ablation_outcome_rl_searcher"] \
        == wave_of["train@ablation_no_searcher_supervision"]
    assert wave_of["evaluate@multiagent_opd"] == wave_of["evaluate@ablation_outcome_rl_searcher"]
    assert wave_of["report"] == len(plan) - 1 and plan[-1] == ["report"]
    for stage, deps in graph.items():  # a wave never holds a stage together with its input
        assert all(wave_of[d] < wave_of[stage] for d in deps)


def test_select_by_name_and_group_and_upstream_through_unchosen(graph):
    assert select(graph, ["evaluate"]) == [s for s in graph if s.startswith("evaluate@")]
    assert select(graph, ["report", "splits"]) == ["splits", "report"]
    with pytest.raises(ValueError, match="unknown stage"):
        select(graph, ["no_such_stage"])
    # corpus -> index -> base_model: without index chosen, base_model waits for corpus itself
    assert "corpus" in upstream_of(graph, "base_model", ["corpus", "base_model"])


def test_model_stages_go_to_the_gpu_pool(graph):
    assert {s for s in graph if pool_for(s) == "cpu"} == {"splits", "corpus", "validate_splits", "index", "report"}


def test_report_reads_exactly_the_evaluated_systems():
    spec = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    evaluated = set(spec["evaluate"]["foreach"])
    assert evaluated == {s.name for s in SYSTEMS}
    assert set(spec["report"]["deps"]) >= {f"data/eval/{name}/records.parquet" for name in evaluated}


def test_repro_status_reads_dvc_messages():
    assert repro_status("Stage 'splits' didn't change, skipping\n", "splits") == "skipped"
    assert repro_status("Stage 'train@ablation_base_teacher' is cached - skipping run, checking out outputs",
                        "train@ablation_base_teacher") == "restored"
    assert repro_status("Running stage 'splits':\n> python -m pipeline run splits", "splits") == "ran"
    assert repro_status("Stage 'corpus' didn't change, skipping", "splits") == "ran"


def test_only_transient_failures_are_retried():
    assert is_transient(-9, "") and is_transient(137, "")
    assert is_transient(1, "ERROR: Unable to acquire lock. Most likely another DVC process is running")
    assert not is_transient(1, "ERROR: failed to reproduce 'splits': exited with 2")

    def state(error):
        return SimpleNamespace(result=lambda raise_on_failure=False: error)

    assert retry_if_transient(None, None, state(StageFailed("lock", transient=True)))
    assert not retry_if_transient(None, None, state(StageFailed("bad params", transient=False)))
    assert not retry_if_transient(None, None, state(ValueError("bug")))


def test_merge_lock_entry_keeps_other_stages(tmp_path):
    lock = tmp_path / "dvc.lock"
    merge_lock_entry(lock, "splits", {"cmd": "a"})
    merge_lock_entry(lock, "corpus", {"cmd": "b"})
    merge_lock_entry(lock, "splits", {"cmd": "c"})
    assert yaml.safe_load(lock.read_text()) == {"schema": "2.0",
                                                "stages": {"splits": {"cmd": "c"}, "corpus": {"cmd": "b"}}}


def test_deployments_validate():
    built = {d.name: (d, pool) for d, pool in deployments()}
    assert set(built) == {"paper", "smoke", "draws"}
    assert built["paper"][1] == "gpu" and built["paper"][0].parameters == {"profile": "paper"}
    assert built["smoke"][1] == "cpu" and built["smoke"][0].parameters == {"profile": "ci"}
    draws, pool = built.pop("draws")
    assert pool == "cpu" and draws.entrypoint == "flows/draws.py:draws_flow" and draws.flow_name == "maopd-draws"
    (schedule,) = draws.schedules
    assert isinstance(schedule.schedule, CronSchedule) and schedule.schedule.cron == "0 4 * * 6"  # Saturday 04:00
    assert schedule.schedule.timezone == "UTC"
    assert draws.parameters == {"seed_sets": ["G"], "precision": "auto", "profile": "tiny", "replace": True}
    draws_flow.validate_parameters(draws.parameters)
    with pytest.raises(Exception):  # noqa: B017 - a precision the flow does not know
        draws_flow.validate_parameters({**draws.parameters, "precision": "fp8"})
    for name, (deployment, _) in built.items():
        assert deployment.entrypoint == "flows/stages.py:paper_flow"
        (schedule,) = deployment.schedules
        assert isinstance(schedule.schedule, CronSchedule) and schedule.schedule.cron == DEPLOYMENTS[name][1]
        paper_flow.validate_parameters(deployment.parameters)  # raises on an unknown or mistyped parameter
    with pytest.raises(ValueError):
        CronSchedule(cron="0 3 * * funday")
    with pytest.raises(Exception):  # noqa: B017 - Prefect's error class for an unknown parameter is not pinned here
        paper_flow.validate_parameters({"profile": "ci", "no_such_parameter": 1})


def _dvc(args: list[str], cwd: Path) -> str:
    proc = subprocess.run([dvc_executable(), *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


@pytest.mark.slow
def test_dvc_remote_round_trip(tmp_path, monkeypatch):
    """A stage run and pushed in one clone is pulled into another, where it is up to date."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    first = copy_checkout(tmp_path / "first", profile="ci")
    outcome = run_stage(RunLayout.for_profile(first, None), "splits", [])
    assert outcome.status == "ran"
    storage = first / ".dvc-storage"
    assert any(p.is_file() for p in storage.rglob("*")), "dvc push wrote nothing to the remote"

    second = copy_checkout(tmp_path / "second", profile="ci")  # another machine: its own cache
    shutil.copy2(first / "dvc.lock", second / "dvc.lock")  # what git carries between clones
    _dvc(["remote", "modify", "--local", "storage", "url", str(storage)], second)
    _dvc(["pull", "splits"], second)
    assert json.loads(_dvc(["status", "--json", "splits"], second)) == {}
    first_test = pd.read_parquet(first / "data/splits/test.parquet")
    pd.testing.assert_frame_equal(pd.read_parquet(second / "data/splits/test.parquet"), first_test)


@pytest.mark.slow
def test_flow_runs_stages_then_skips_them(tmp_path, monkeypatch):
    """Through Prefect (a temporary server): the ci profile from a tiny-profile checkout, two
    independent stages and one downstream; the second run skips all three."""
    from prefect.testing.utilities import prefect_test_harness

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    checkout = copy_checkout(tmp_path / "repo", profile="tiny")
    wanted = ["splits", "corpus", "validate_splits"]
    with prefect_test_harness():
        from prefect.client.orchestration import get_client

        first = paper_flow(profile="ci", stages=wanted, checkout=str(checkout))
        lock = RunLayout.for_profile(checkout, "ci").workspace("splits") / "dvc.lock"
        touched = lock.stat().st_mtime_ns
        second = paper_flow(profile="ci", stages=wanted, checkout=str(checkout))
        with get_client(sync_client=True) as client:
            summaries = [a for a in client.read_artifacts() if a.key == "maopd-ci-summary"]
    assert first == dict.fromkeys(wanted, "ran") and second == dict.fromkeys(wanted, "skipped")
    assert lock.stat().st_mtime_ns == touched  # up to date in the run root: no workspace was prepared
    assert len(summaries) == 2 and "3 skipped" in max(summaries, key=lambda a: a.created).data
    root = RunLayout.for_profile(checkout, "ci").root
    assert root != checkout and "profile: ci" in (root / "params.yaml").read_text()
    assert json.loads(_dvc(["status", "--json", *wanted], root)) == {}  # synced back, clean
    assert len(pd.read_parquet(root / "data/splits/test.parquet")) > 0
    assert not (checkout / "data").exists()  # the checkout's own (tiny) data is untouched


def test_uncached_outputs_are_found_from_any_cwd(tmp_path, monkeypatch):
    from flows.workspaces import _uncached_outs

    monkeypatch.chdir(tmp_path)
    profile = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())["profile"]
    assert _uncached_outs(REPO_ROOT, "evaluate@c_mas_base") == []
    assert f"reports/{profile}/paper.md" in _uncached_outs(REPO_ROOT, "report")
    with pytest.raises(StageFailed, match="no stage"):
        _uncached_outs(REPO_ROOT, "evaluate@nobody")
    assert "@" not in RunLayout.for_profile(REPO_ROOT, "ci").workspace("evaluate@c_mas_base").name
