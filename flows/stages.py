"""The paper as a Prefect flow: one task per DVC stage, each `dvc repro -s <stage>` in its own
workspace (see `flows/workspaces.py`), submitted as soon as its upstream stages finish, so
independent stages (the ablations, the evaluations) run at the same time.

- Every task run is named after its stage; DVC's output streams into its log line by line.
- Stages that load a model carry the tag `gpu` and hold a slot of the global concurrency
  limit `gpu` (created with `gpu_slots` slots when missing) while they run. A stage that
  waits for a slot says so in its log and sits in the state `AwaitingConcurrencySlot`.
- DVC decides what is stale. One `dvc status` of the run root at the start finds the stages
  that are up to date with everything upstream of them; those end in the state `Skipped`
  at once, without a workspace. The others run `dvc repro`, which may also skip.
- A failure that may pass (a DVC lock held, the remote unreachable, the process killed) is
  retried; a stage's own error is not.
- Each task logs the MLflow run of its stage and links it as a Prefect artifact, by the run's
  id: the one the stage's record in the run root names (data/runs/<stage>.json, a DVC output
  of the stage; pipeline.tracking.links.run_link), i.e. the run that made the outputs there.
  When the stages are done, `python -m pipeline record-runs` gives every stage DVC did not run
  a run of its own (pipeline/record_runs.py); the flow run ends with a markdown artifact: stage
  outcomes, the report's main table, links.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact, create_markdown_artifact
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.context import TaskRunContext
from prefect.exceptions import UnfinishedRun
from prefect.states import Completed, Pending, Running

from flows.dvc_graph import pool_for, select, stage_graph, uncached_outputs, upstream_of
from flows.mlflow_link import recorded_stage_run
from flows.summary import summary_markdown
from flows.workspaces import RunLayout, StageFailed, prepare_root, run_stage, stage_env, stale_stages, up_to_date
from pipeline.tracking.links import run_link
from pipeline.tracking.runs import ensure_experiment
from pipeline.tracking.stage_record import record_path

ROOT = Path(__file__).resolve().parents[1]
GPU_LIMIT = "gpu"
WAITING = "AwaitingConcurrencySlot"  # Prefect's own name for a run held back by a limit
_slot_check = threading.Lock()


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    error = state.result(raise_on_failure=False)
    return isinstance(error, StageFailed) and error.transient


async def _ensure_limit(name: str, slots: int) -> bool:
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(name)
            return False
        except ObjectNotFound:
            await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))
            return True


def ensure_gpu_limit(slots: int) -> bool:
    """Create the `gpu` limit if missing (True); an existing one (set in the UI) is left as it is."""
    return asyncio.run(_ensure_limit(GPU_LIMIT, slots))


STATE_RECORD_WAIT = 10.0  # seconds a shown state waits for the server to record the task run


def _set_state(state: Any) -> None:
    """Show `state` on the current task run. Prefect records a task run from its engine's
    events, asynchronously, so right after a task starts the server may not know it yet
    (404): retry until it does. The state is only shown, so after STATE_RECORD_WAIT the stage
    goes on without it rather than failing."""
    from prefect.exceptions import ObjectNotFound, PrefectHTTPStatusError

    context = TaskRunContext.get()
    if context is None:  # called outside a task run (tests): nothing to show
        return
    deadline = time.monotonic() + STATE_RECORD_WAIT
    with get_client(sync_client=True) as client:
        while True:
            try:
                client.set_task_run_state(context.task_run.id, state, force=True)
                return
            except (ObjectNotFound, PrefectHTTPStatusError) as e:
                if not (isinstance(e, ObjectNotFound) or e.response.status_code == 404):
                    raise
                if time.monotonic() > deadline:
                    get_run_logger().warning(f"could not show state {state.name!r}: the server has not "
                                             f"recorded task run {context.task_run.id}")
                    return
                time.sleep(0.2)


def _slots_free(name: str) -> bool:
    """Whether the limit has a free slot now (True when it does not exist: nothing to wait for)."""
    from prefect.exceptions import ObjectNotFound

    with get_client(sync_client=True) as client:
        try:
            limit = client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            return True
    return not limit.active or limit.active_slots < limit.limit


@contextlib.contextmanager
def gpu_slot(logger: Any) -> Iterator[None]:
    """Hold a slot of the `gpu` limit. When none is free, log it and show the task run as
    waiting (a Pending state named AwaitingConcurrencySlot) until one frees up. The check and
    the taking of a free slot happen under one lock, so sibling stages that become ready
    together do not both see the last slot free."""
    with contextlib.ExitStack() as stack:
        with _slot_check:
            waiting = not _slots_free(GPU_LIMIT)
            if not waiting:
                stack.enter_context(concurrency(GPU_LIMIT, occupy=1, strict=False))
        if waiting:
            logger.info(f"Waiting for a slot of the concurrency limit '{GPU_LIMIT}' (every slot is held by "
                        f"another stage; change the limit under Concurrency in the UI)")
            _set_state(Pending(name=WAITING, message=f"waiting for a slot of the '{GPU_LIMIT}' limit"))
            started = time.perf_counter()
            stack.enter_context(concurrency(GPU_LIMIT, occupy=1, strict=False))
            _set_state(Running())
            logger.info(f"Got a '{GPU_LIMIT}' slot after {time.perf_counter() - started:.0f} s")
        yield


@task(retries=2, retry_delay_seconds=15, retry_condition_fn=retry_if_transient)
def repro_stage(stage: str, checkout: str, profile: str, upstream: list[str], pool: str,
                known_up_to_date: bool = False, uncached: list[str] | None = None) -> Any:
    logger = get_run_logger()
    layout = RunLayout(Path(checkout), profile)
    if known_up_to_date:
        status = "skipped"
        logger.info(f"{stage}: up to date in {layout.root} (dvc status: its deps, params and outputs, and those "
                    f"of every stage upstream, match dvc.lock); nothing to run")
        result: dict[str, Any] = {"stage": stage, "status": status, "workspace": None, "seconds": {}}
    else:
        with gpu_slot(logger) if pool == "gpu" else contextlib.nullcontext():
            outcome = run_stage(layout, stage, upstream, on_line=logger.info, uncached=uncached)
        status, result = outcome.status, outcome.as_dict()
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in outcome.seconds.items())
        logger.info(f"{stage}: {status} by DVC; {phases} (workspace overhead {outcome.overhead:.1f} s)")
    run = recorded_stage_run(layout.root, stage)  # synced back with the stage's outputs, or from before
    if run is not None:
        result["mlflow_run_id"] = run.run_id
        what = "produced" if status == "ran" else "that made its outputs (stage up to date)"
        logger.info(f"MLflow run {what}: {run.run_id} {run.url}")
        create_link_artifact(run_link(run.run_id), link_text=f"MLflow run of {stage}",
                             description=f"{stage}: {status}")
    else:
        logger.info(f"No MLflow run recorded for this stage: no {record_path(layout.root, stage)} (its outputs "
                    "here were not made by a stage run that ended FINISHED)")
    if status != "ran":
        return Completed(name="Skipped", message=f"{stage}: {status} by DVC, nothing to run", data=result)
    return result


def stage_task(stage: str, pool: str) -> Any:
    """`repro_stage` as the task of one stage: named after it from the moment its run is
    created (Prefect names a run `<task name>-<key>` until it starts), tagged with its pool."""
    return repro_stage.with_options(name=stage, task_run_name=stage, tags=[pool])


RECORDED = ("ran", "skipped", "restored")  # the outcomes of a stage with a dvc.lock entry of this run


def record_runs(layout: RunLayout, root: Path, statuses: dict[str, str], since: float) -> None:
    """`python -m pipeline record-runs` in the run root for every stage that ran or that DVC
    skipped or restored: the runs of the stages that ran get their state, the others a run of
    their own (pipeline/record_runs.py). A failure here is logged, not raised: the stages'
    outputs stand either way."""
    stages = [f"{stage}={status}" if status != "ran" else stage
              for stage, status in statuses.items() if status in RECORDED]
    if not stages:
        return
    cmd = [sys.executable, "-m", "pipeline", "record-runs", "--since", str(since),
           *(arg for stage in stages for arg in ("--stage", stage))]
    proc = subprocess.run(cmd, cwd=root, env=stage_env(layout), capture_output=True, text=True)
    logger = get_run_logger()
    if proc.returncode != 0:
        logger.warning(f"record-runs failed ({proc.returncode}): {(proc.stdout + proc.stderr)[-2000:]}")
    else:
        logger.info("MLflow runs of the stages:\n" + proc.stdout.strip())


@flow(name="maopd-paper")
def paper_flow(profile: str | None = None, stages: list[str] | None = None, checkout: str = str(ROOT),
               gpu_slots: int = 1) -> dict[str, str]:
    """Every stage of the paper (or `stages`, by name or foreach group) on `profile`
    (default: the checkout's). Returns {stage: ran | skipped | restored}."""
    started = time.time()
    layout = RunLayout.for_profile(Path(checkout), profile)
    root = prepare_root(layout)
    graph = stage_graph(root)
    chosen = select(graph, stages)
    if any(pool_for(s) == "gpu" for s in chosen):
        ensure_gpu_limit(gpu_slots)
    env = stage_env(layout)  # one store for all tasks, created before they start at once
    ensure_experiment(layout.profile, env["MLFLOW_TRACKING_URI"], env["MLFLOW_ARTIFACT_ROOT"])
    clean = up_to_date({s: upstream_of(graph, s, chosen) for s in chosen}, stale_stages(layout))
    uncached = uncached_outputs(root)
    futures: dict[str, Any] = {}
    for stage in chosen:  # graph order: upstream futures exist before they are waited for
        pool = pool_for(stage)
        futures[stage] = stage_task(stage, pool).submit(
            stage, str(layout.checkout), layout.profile, graph[stage], pool, stage in clean, uncached.get(stage),
            wait_for=[futures[u] for u in upstream_of(graph, stage, chosen)],
        )
    statuses: dict[str, str] = {}
    errors: list[BaseException] = []
    for stage, future in futures.items():
        try:
            statuses[stage] = future.result()["status"]
        except UnfinishedRun:  # an upstream stage failed: this one never started
            statuses[stage] = "not run"
        except Exception as error:
            statuses[stage] = "failed"
            errors.append(error)
    record_runs(layout, root, statuses, started)
    create_markdown_artifact(
        summary_markdown(root, layout.profile, statuses),
        key=f"maopd-{layout.profile}-summary", description="stage outcomes, the report's main table, links")
    if errors:
        raise errors[0]
    return statuses
