"""The paper as a Prefect flow: one task per DVC stage, each `dvc repro -s <stage>` in its own
workspace (see `flows/workspaces.py`), submitted as soon as its upstream stages finish, so
independent stages (the ablations, the evaluations) run at the same time.

- Stages that load a model carry the tag `gpu` and hold a slot of the global concurrency
  limit `gpu` (created with `gpu_slots` slots when missing) while they run.
- A failure that may pass (a DVC lock held, the remote unreachable, the process killed) is
  retried; a stage's own error is not.
- DVC decides what is stale: an unchanged stage ends in the state `Skipped` (a Completed state).
- Each task logs, and links as a Prefect artifact, the MLflow run of its stage.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

from prefect import flow, get_run_logger, task
from prefect.artifacts import create_link_artifact
from prefect.client.orchestration import get_client
from prefect.concurrency.sync import concurrency
from prefect.states import Completed

from flows.dvc_graph import pool_for, select, stage_graph, upstream_of
from flows.mlflow_link import find_stage_run
from flows.workspaces import RunLayout, StageFailed, prepare_root, run_stage, stage_env
from pipeline.tracking import ensure_experiment

ROOT = Path(__file__).resolve().parents[1]
GPU_LIMIT = "gpu"


def retry_if_transient(task: Any, task_run: Any, state: Any) -> bool:
    error = state.result(raise_on_failure=False)
    return isinstance(error, StageFailed) and error.transient


async def _ensure_limit(name: str, slots: int) -> None:
    from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate
    from prefect.exceptions import ObjectNotFound

    async with get_client() as client:
        try:
            await client.read_global_concurrency_limit_by_name(name)
        except ObjectNotFound:
            await client.create_global_concurrency_limit(GlobalConcurrencyLimitCreate(name=name, limit=slots))


def ensure_gpu_limit(slots: int) -> None:
    """Create the `gpu` limit if missing; an existing one (set in the UI) is left as it is."""
    asyncio.run(_ensure_limit(GPU_LIMIT, slots))


@task(name="dvc-repro", task_run_name="{stage}", retries=2, retry_delay_seconds=15,
      retry_condition_fn=retry_if_transient)
def repro_stage(stage: str, checkout: str, profile: str, upstream: list[str], pool: str) -> Any:
    logger = get_run_logger()
    layout = RunLayout(Path(checkout), profile)
    started = time.time()
    if pool == "gpu":
        with concurrency(GPU_LIMIT, occupy=1, strict=False):
            outcome = run_stage(layout, stage, upstream)
    else:
        outcome = run_stage(layout, stage, upstream)
    for line in outcome.log_tail:
        logger.info(line)
    result = outcome.as_dict()
    env = stage_env(layout)
    since = started if outcome.status == "ran" else None
    run = find_stage_run(env["MLFLOW_TRACKING_URI"], profile, stage, since)
    if run is not None:
        result["mlflow_run_id"] = run.run_id
        what = "produced" if outcome.status == "ran" else "last produced (stage up to date)"
        logger.info(f"MLflow run {what}: {run.run_id} {run.url}")
        create_link_artifact(run.url, link_text=f"MLflow run of {stage}",
                             description=f"{stage}: {outcome.status}")
    if outcome.status != "ran":
        return Completed(name="Skipped", message=f"{stage}: {outcome.status} by DVC, nothing to run", data=result)
    return result


@flow(name="maopd-paper")
def paper_flow(profile: str | None = None, stages: list[str] | None = None, checkout: str = str(ROOT),
               gpu_slots: int = 1) -> dict[str, str]:
    """Every stage of the paper (or `stages`, by name or foreach group) on `profile`
    (default: the checkout's). Returns {stage: ran | skipped | restored}."""
    layout = RunLayout.for_profile(Path(checkout), profile)
    root = prepare_root(layout)
    graph = stage_graph(root)
    chosen = select(graph, stages)
    if any(pool_for(s) == "gpu" for s in chosen):
        ensure_gpu_limit(gpu_slots)
    env = stage_env(layout)  # one store for all tasks, created before they start at once
    ensure_experiment(layout.profile, env["MLFLOW_TRACKING_URI"], env["MLFLOW_ARTIFACT_ROOT"])
    futures: dict[str, Any] = {}
    for stage in chosen:  # graph order: upstream futures exist before they are waited for
        pool = pool_for(stage)
        futures[stage] = repro_stage.with_options(tags=[pool]).submit(
            stage, str(layout.checkout), layout.profile, graph[stage], pool,
            wait_for=[futures[u] for u in upstream_of(graph, stage, chosen)],
        )
    return {stage: future.result()["status"] for stage, future in futures.items()}
