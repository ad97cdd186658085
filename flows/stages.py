"""Prefect flows around `dvc repro`: DVC decides what is stale, Prefect decides where it runs.

- `stage_flow(stage)`: reproduces one DVC stage (`dvc repro --single-item`); deployed on
  the GPU work pool for model stages and on the CPU pool for data and report stages.
- `paper_flow()`: walks the DVC DAG in topological order and runs every stage, so the
  Prefect UI shows one task per stage of the paper. DVC's lock serialises stages that
  share a checkout, so the walk is sequential; stages on other machines run in their
  own checkouts through their deployment.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from prefect import flow, get_run_logger, task

ROOT = Path(__file__).resolve().parents[1]
GPU_STAGE_PREFIXES = ("base_model", "teacher", "team", "ablation", "prompted_critic", "evaluate")


def dvc_executable() -> str:
    candidate = Path(sys.executable).with_name("dvc")
    return str(candidate) if candidate.exists() else "dvc"


def stage_order(root: Path = ROOT) -> list[str]:
    """Stage names of dvc.yaml (foreach items expanded) in an order that respects the DAG."""
    import networkx as nx
    from dvc.repo import Repo

    with Repo(str(root)) as repo:
        graph = repo.index.graph
        stages = [s for s in reversed(list(nx.topological_sort(graph))) if hasattr(s, "cmd")]
        return [s.addressing.split(":")[-1] for s in stages]


def pool_for(stage: str) -> str:
    return "gpu" if stage.startswith(GPU_STAGE_PREFIXES) else "cpu"


@task(name="dvc-repro", task_run_name="{stage}")
def repro_stage(stage: str, root: str) -> str:
    logger = get_run_logger()
    # Stage commands call `python`: make it this interpreter, whatever PATH the worker has.
    env = {**os.environ, "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    proc = subprocess.run([dvc_executable(), "repro", "--single-item", stage], cwd=root, env=env,
                          capture_output=True, text=True)
    for line in (proc.stdout + proc.stderr).splitlines()[-40:]:
        logger.info(line)
    if proc.returncode != 0:
        raise RuntimeError(f"dvc repro {stage} failed with exit code {proc.returncode}")
    return stage


@flow(name="maopd-stage")
def stage_flow(stage: str, root: str = str(ROOT)) -> str:
    return repro_stage(stage, root)


@flow(name="maopd-paper")
def paper_flow(root: str = str(ROOT), stages: list[str] | None = None) -> list[str]:
    order = stage_order(Path(root))
    chosen = [s for s in order if stages is None or s in stages or s.split("@")[0] in stages]
    return [repro_stage(s, root) for s in chosen]
