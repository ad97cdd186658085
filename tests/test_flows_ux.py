"""What a Prefect user sees: stage-named task runs, DVC output streamed line by line without
control characters, a stage visibly waiting for the `gpu` slot, the `gpu` limit and pools
after deploying, the `paper` schedule paused without a gpu worker, the up-to-date check that
skips stages without a workspace, and the flow's closing summary."""

from __future__ import annotations

import re
import stat
import sys
import time

import pytest

from flows import workspaces
from flows.deploy import PAUSED_TAG, deployments
from flows.stages import GPU_LIMIT, WAITING, gpu_slot, stage_task
from flows.summary import report_sections, summary_markdown
from flows.workspaces import up_to_date
from pipeline import checkout_copy
from pipeline.checkout_copy import clean_line, run_dvc, same_file
from pipeline.tracking.stage_record import StageRecord, write_record


def test_task_runs_carry_the_stage_name_from_creation():
    task = stage_task("train@ablation_base_teacher", "gpu")
    assert task.name == "train@ablation_base_teacher" and task.task_run_name == "train@ablation_base_teacher"
    assert task.tags == {"gpu"}


def test_output_lines_lose_progress_redraws_colours_and_dvc_hints():
    assert clean_line("Loading:  10%|#  | 1/10\rLoading: 100%|##########| 10/10\n") == "Loading: 100%|##########| 10/10"
    assert clean_line("\x1b[32mRunning stage 'splits':\x1b[0m\n") == "Running stage 'splits':"
    assert clean_line("Use `dvc push` to send your updates to remote storage.\n") is None
    assert clean_line("To track the changes with git, run:\n") is None
    assert clean_line("\tgit add dvc.lock\n") is None
    assert clean_line("\r\n") is None and clean_line("stage output\n") == "stage output"


def test_dvc_output_streams_while_the_command_runs(tmp_path, monkeypatch):
    fake = tmp_path / "dvc"
    fake.write_text(f"#!{sys.executable}\nimport sys, time\nprint('first', flush=True)\ntime.sleep(1.5)\n"
                    "print('\\x1b[1mlast\\x1b[0m', flush=True)\nsys.exit(3)\n")
    fake.chmod(fake.stat().st_mode | stat.S_IEXEC)
    monkeypatch.setattr(checkout_copy, "dvc_executable", lambda checkout=None: str(fake))
    seen = []
    code, out = run_dvc(["repro"], tmp_path, {}, on_line=lambda line: seen.append((time.monotonic(), line)))
    ended = time.monotonic()
    assert code == 3 and out == "first\nlast" and [line for _, line in seen] == ["first", "last"]
    assert seen[0][0] < ended - 1.0  # the first line arrived while the command still ran


def test_only_stages_clean_with_everything_upstream_count_as_up_to_date():
    graph = {"splits": [], "corpus": [], "validate": ["splits"], "index": ["corpus"], "base": ["validate", "index"]}
    assert up_to_date(graph, set()) == set(graph)
    assert up_to_date(graph, {"corpus"}) == {"splits", "validate"}  # index and base wait for corpus
    assert up_to_date(graph, {"validate"}) == {"splits", "corpus", "index"}
    assert up_to_date(graph, None) == set()  # `dvc status` failed: DVC decides in each workspace


def test_mirror_compares_size_and_modification_time(tmp_path):
    src, dst = tmp_path / "a.py", tmp_path / "b.py"
    src.write_text("x = 1\n")
    assert not same_file(src, dst)
    import shutil

    shutil.copy2(src, dst)
    assert same_file(src, dst)
    src.write_text("x = 2\n")  # same size, new content and time
    assert not same_file(src, dst)


def test_mirror_brings_the_kept_draws_and_leaves_the_workspaces_report_alone(tmp_path):
    import subprocess

    checkout, dest = tmp_path / "checkout", tmp_path / "workspace"
    for rel, text in {"params.yaml": "profile: tiny\n", "pipeline/x.py": "x = 1\n", ".dvc/config": "",
                      "reports/tiny/draws/G.json": "{}\n", "reports/tiny/paper.md": "checkout's\n"}.items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=checkout, check=True)
    for rel, text in {"reports/tiny/draws/old.json": "{}\n", "reports/tiny/paper.md": "workspace's\n"}.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_text(text)
    workspaces.mirror(workspaces.RunLayout(checkout, "tiny"), dest)
    assert (dest / "reports/tiny/draws/G.json").exists() and (dest / "pipeline/x.py").exists()
    assert not (dest / "reports/tiny/draws/old.json").exists()  # deleted from the checkout: gone here too
    assert (dest / "reports/tiny/paper.md").read_text() == "workspace's\n"  # an output, not code


def test_paper_schedule_waits_paused_until_a_gpu_worker_is_online():
    paused = {d.name: d for d, _ in deployments(online={"cpu"})}
    (schedule,) = paused["paper"].schedules
    assert schedule.active is False and "no worker of the `gpu` pool is online" in paused["paper"].description
    # the UI's lists show a deployment's tags and its description starts with why it is Not Ready
    assert paused["paper"].description.startswith("**Schedule paused on purpose")
    assert PAUSED_TAG in paused["paper"].tags
    assert paused["smoke"].schedules[0].active is True and not any("paused" in t for t in paused["smoke"].tags)
    running = {d.name: d for d, _ in deployments(online={"cpu", "gpu"})}
    assert running["paper"].schedules[0].active is True and "paused" not in running["paper"].description
    assert not any("paused" in t for t in running["paper"].tags)


@pytest.mark.parametrize("online", [None, set(), {"cpu"}, {"cpu", "gpu"}])
def test_the_draws_schedule_is_always_registered_paused_and_says_why(online):
    draws = {d.name: d for d, _ in deployments(online=online)}["draws"]
    (schedule,) = draws.schedules
    assert schedule.active is False
    assert PAUSED_TAG in draws.tags and "cpu" in draws.tags
    assert draws.description.startswith("**Schedule paused on purpose: a draw takes about an hour of a machine")
    assert "changes the committed report" in draws.description and "Resume" in draws.description


def _report_folder(tmp_path):
    folder = tmp_path / "reports" / "ci"
    (folder / "data_docs" / "splits").mkdir(parents=True)
    (folder / "data_docs" / "splits" / "index.html").write_text("<html></html>")
    (folder / "paper.html").write_text("<html></html>")
    (folder / "paper.md").write_text(
        "# R\n\n## Provenance\n\n- x\n\n## Main table\n\n"
        "| system | ours (ci) macro avg@4 | published (Qwen3-4B, paper) macro avg@4 |\n|---|---|---|\n"
        "| MultiAgent-OPD | 1.00 | 38.68 |\n\n## What this scale can show\n\n- **Made at:** ci\n\n"
        "## Per dataset avg@4\n\n| q |\n")
    return folder


def _record(root, stage: str, run_id: str, profile: str = "ci") -> None:
    """The record a stage writes when its MLflow run ends FINISHED (data/runs/<stage>.json)."""
    write_record(root, StageRecord(stage=stage, run_id=run_id, experiment_id="1",
                                   experiment=f"multiagent-opd-{profile}", profile=profile, seed_set="A",
                                   cpu="x86", precision="float32", commit="c0ffee", code="abc"))


def test_flow_summary_holds_the_main_table_and_links(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_UI_URL", "http://127.0.0.1:5000")
    folder = _report_folder(tmp_path)
    ids = {stage: f"{i:032x}" for i, stage in enumerate(("report", "validate_splits", "splits"), start=1)}
    for stage, run_id in ids.items():
        _record(tmp_path, stage, run_id)
    assert [s.splitlines()[0] for s in report_sections((folder / "paper.md").read_text())] == [
        "## Main table", "## What this scale can show"]
    md = summary_markdown(tmp_path, "ci", {"splits": "skipped", "report": "ran", "index": "failed",
                                           "corpus": "restored"})
    assert "| MultiAgent-OPD | 1.00 | 38.68 |" in md and "**Made at:** ci" in md and "Per dataset" not in md
    assert "1 failed, 1 ran, 1 restored, 1 skipped" in md
    links = re.findall(r"\]\(([^)]+)\)", md)
    # http links into the MLflow server, each naming the run its stage recorded by id
    assert links and all(link.startswith("http://127.0.0.1:5000/maopd/") for link in links), links
    assert re.findall(r"https?://[^\s)`]+", md.replace("(http://127.0.0.1:5000, ", "")) == links  # no other URL
    assert f"http://127.0.0.1:5000/maopd/artifacts/{ids['report']}/paper.html" in links
    assert f"http://127.0.0.1:5000/maopd/artifacts/{ids['validate_splits']}/data_docs/index.html" in links
    assert f"| [report](http://127.0.0.1:5000/maopd/run/{ids['report']}) | ran |" in md
    assert f"| [splits](http://127.0.0.1:5000/maopd/run/{ids['splits']}) | skipped |" in md
    assert "http://127.0.0.1:5000/maopd/experiments/multiagent-opd-ci" in links
    assert "file:" not in md and str(tmp_path) not in md
    assert "| index | failed |" in md  # a failed stage has no run to link
    assert "| corpus | restored, no run recorded |" in md  # no data/runs/corpus.json


def test_flow_summary_without_records_links_no_run(tmp_path, monkeypatch):
    """Outputs without the records of the stages that made them (or another profile's) get no
    link: a link by name would open whatever run of that name the store holds."""
    monkeypatch.setenv("MLFLOW_UI_URL", "http://127.0.0.1:5000")
    _report_folder(tmp_path)
    _record(tmp_path, "report", "f" * 32, profile="tiny")
    md = summary_markdown(tmp_path, "ci", {"report": "ran"})
    assert re.findall(r"\]\(([^)]+)\)", md) == ["http://127.0.0.1:5000/maopd/experiments/multiagent-opd-ci"]
    assert "| report | ran, no run recorded |" in md
    assert "Report: `reports/ci/paper.html` (no run recorded" in md
    assert "Data Docs, splits: `reports/ci/data_docs/splits/index.html` (no run recorded)" in md


def test_the_summary_tables_are_narrow(tmp_path):
    _report_folder(tmp_path)
    md = summary_markdown(tmp_path, "ci", {f"train@{s}": "ran" for s in ("c_mas_rl", "multiagent_opd")})
    headers = [line for line in md.splitlines() if line.startswith("| ") and "---" not in line]
    assert "| system | ours avg@4 | paper avg@4 |" in headers  # the report's long headers, shortened
    for table_header in (h for h in headers if h.startswith("| system") or h.startswith("| stage")):
        assert max(len(c.strip()) for c in table_header.strip("|").split("|")) <= 20, table_header


@pytest.fixture(scope="module")
def prefect_server():
    from prefect.testing.utilities import prefect_test_harness

    with prefect_test_harness(server_startup_timeout=120):
        yield


def test_a_stage_waiting_for_the_gpu_slot_is_shown_waiting(prefect_server):
    from prefect import flow, get_run_logger, task
    from prefect.client.orchestration import get_client

    from flows.stages import ensure_gpu_limit

    @task
    def hold(seconds: float) -> None:
        with gpu_slot(get_run_logger()):
            time.sleep(seconds)

    @flow
    def two_gpu_stages() -> None:
        ensure_gpu_limit(1)
        futures = [hold.with_options(name=name, task_run_name=name).submit(2.0) for name in ("first", "second")]
        for future in futures:
            future.result()

    two_gpu_stages()
    with get_client(sync_client=True) as client:
        histories = {run.name: [s.name for s in client.read_task_run_states(run.id)] for run in client.read_task_runs()}
    waited = [name for name, states in histories.items() if WAITING in states]
    assert len(waited) == 1, histories  # one held the slot, the other showed that it waited
    assert histories[waited[0]][-3:] == [WAITING, "Running", "Completed"]


def _fake_state_client(monkeypatch, failures: int):
    """flows.stages' Prefect client, as seen from inside a task run whose record reaches the
    server only after `failures` calls (each a 404, as Prefect answers for a run it has not
    recorded yet)."""
    import types

    import httpx
    from prefect.exceptions import PrefectHTTPStatusError

    from flows import stages

    calls, warnings = [], []

    class Client:
        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def set_task_run_state(self, task_run_id, state, force):
            calls.append(state.name)
            if len(calls) <= failures:
                request = httpx.Request("POST", f"http://server/api/task_runs/{task_run_id}/set_state")
                raise PrefectHTTPStatusError("404", request=request, response=httpx.Response(404, request=request))

    context = types.SimpleNamespace(task_run=types.SimpleNamespace(id="run-1"))
    monkeypatch.setattr(stages.TaskRunContext, "get", classmethod(lambda cls: context))
    monkeypatch.setattr(stages, "get_client", lambda sync_client: Client())
    monkeypatch.setattr(stages, "get_run_logger", lambda: types.SimpleNamespace(warning=warnings.append))
    monkeypatch.setattr(stages.time, "sleep", lambda s: None)
    return stages, calls, warnings


def test_a_shown_state_waits_for_the_server_to_record_the_task_run(monkeypatch):
    from prefect.states import Pending

    stages, calls, warnings = _fake_state_client(monkeypatch, failures=3)
    stages._set_state(Pending(name=WAITING))
    assert calls == [WAITING] * 4 and warnings == []


def test_a_state_the_server_never_takes_is_skipped_with_a_warning(monkeypatch):
    from prefect.states import Pending

    stages, calls, warnings = _fake_state_client(monkeypatch, failures=10**9)
    monkeypatch.setattr(stages, "STATE_RECORD_WAIT", 0.0)
    stages._set_state(Pending(name=WAITING))  # must not raise: the state is only shown
    assert len(calls) >= 1 and len(warnings) == 1 and "run-1" in warnings[0]


def test_deploying_creates_the_pools_the_gpu_limit_and_the_deployments(prefect_server):
    from prefect.client.orchestration import get_client
    from prefect.exceptions import ObjectNotFound

    from flows.deploy import main

    with get_client(sync_client=True) as client:  # a fresh server: no limit yet (an earlier test made one)
        try:
            client.delete_global_concurrency_limit_by_name(GPU_LIMIT)
        except ObjectNotFound:
            pass
        with pytest.raises(ObjectNotFound):
            client.read_global_concurrency_limit_by_name(GPU_LIMIT)
    main(["--worker-starting", "cpu"])
    with get_client(sync_client=True) as client:
        assert client.read_global_concurrency_limit_by_name(GPU_LIMIT).limit == 1
        assert {p.name for p in client.read_work_pools()} >= {"cpu", "gpu"}
        paper = client.read_deployment_by_name("maopd-paper/paper")
        assert [s.active for s in paper.schedules] == [False]  # no gpu worker online
        assert [s.active for s in client.read_deployment_by_name("maopd-paper/smoke").schedules] == [True]
        draws = client.read_deployment_by_name("maopd-draws/draws")
        assert [s.active for s in draws.schedules] == [False] and draws.work_pool_name == "cpu"  # always paused


def test_the_draws_flow_runs_one_task_per_seed_set_in_turn_and_fails_after_the_others(prefect_server, monkeypatch,
                                                                                        tmp_path):
    from types import SimpleNamespace

    from flows import draws
    from pipeline.draws.workspace import DrawFailed

    calls = []

    def fake_run_draw(checkout, profile, seed_set, precision, keep, replace, on_line):
        calls.append((seed_set, precision, profile, keep, replace))
        on_line(f"Running stage 'splits' of {seed_set}")
        if seed_set == "C":
            raise DrawFailed("dvc repro failed (exit 1)")
        kept = tmp_path / f"{seed_set}.json"
        return SimpleNamespace(kept=kept, draw=SimpleNamespace(workspace=tmp_path / seed_set, resumed=False,
                                                                commit="abc", code_changed=seed_set == "D"))

    monkeypatch.setattr(draws, "run_draw", lambda checkout, **kw: fake_run_draw(checkout, **kw))
    assert draws.draws_flow(seed_sets=["B", "D"], precision="float32", checkout=str(tmp_path)) == {
        "B": str(tmp_path / "B.json"), "D": str(tmp_path / "D.json")}
    assert calls == [("B", "float32", "tiny", True, False), ("D", "float32", "tiny", True, False)]
    calls.clear()
    with pytest.raises(DrawFailed, match="draws failed: C"):
        draws.draws_flow(seed_sets=["C", "G"], checkout=str(tmp_path))
    assert [c[0] for c in calls] == ["C", "G"]  # G still ran after C failed


def test_a_failed_stage_still_leaves_the_summary(prefect_server, tmp_path, monkeypatch):
    """splits fails (its own error, not retried), corpus is independent and runs,
    validate_splits never starts: the flow fails, and its summary says so."""
    from prefect.client.orchestration import get_client

    from flows import stages
    from pipeline.checkout_copy import copy_checkout

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    checkout = copy_checkout(tmp_path / "repo", profile="ci")
    real = stages.run_stage

    def failing(layout, stage, *args, **kwargs):
        if stage == "splits":
            raise workspaces.StageFailed("dvc repro --single-item splits failed (exit 2)", transient=False)
        return real(layout, stage, *args, **kwargs)

    monkeypatch.setattr(stages, "run_stage", failing)
    with pytest.raises(workspaces.StageFailed, match="splits failed"):
        stages.paper_flow(profile="ci", stages=["splits", "corpus", "validate_splits"], checkout=str(checkout))
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts()
    summaries = [a for a in artifacts if a.key == "maopd-ci-summary"]
    assert len(summaries) == 1, [(a.key, a.type, a.description) for a in artifacts]
    assert "1 failed, 1 not run, 1 ran" in summaries[0].data, summaries[0].data
