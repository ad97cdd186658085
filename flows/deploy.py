"""Register the deployments (shown in the Prefect UI) on the CPU and GPU work pools.

    prefect server start                              # or point PREFECT_API_URL at a server
    python -m flows.deploy                            # creates the pools if missing, registers
    prefect worker start --pool cpu                   # and, on each GPU machine: --pool gpu

Deployments: `paper-nightly` (the whole DAG, nightly at 02:00; DVC skips every stage whose
inputs did not change), `stage-cpu` and `stage-gpu` (one stage by name, e.g. the GPU pool's
worker runs `evaluate@multiagent_opd`). Workers run the code from this checkout.
"""

from __future__ import annotations

import asyncio

from prefect import deploy
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate

from flows.stages import ROOT, paper_flow, stage_flow

POOLS = {"cpu": "data, index and report stages", "gpu": "base model, training and evaluation stages"}


async def ensure_pools() -> None:
    async with get_client() as client:
        existing = {p.name for p in await client.read_work_pools()}
        for name, description in POOLS.items():
            if name not in existing:
                await client.create_work_pool(WorkPoolCreate(name=name, type="process", description=description))


def deployments():
    """(deployment, pool) pairs; the flows are loaded from this checkout by the workers."""
    def local(flow, entrypoint):
        return flow.from_source(source=str(ROOT), entrypoint=entrypoint)

    paper = local(paper_flow, "flows/stages.py:paper_flow")
    stage = local(stage_flow, "flows/stages.py:stage_flow")
    return [
        (paper.to_deployment(name="paper-nightly", cron="0 2 * * *", tags=["paper"]), "cpu"),
        (stage.to_deployment(name="stage-cpu", tags=["cpu"]), "cpu"),
        (stage.to_deployment(name="stage-gpu", tags=["gpu"]), "gpu"),
    ]


def main() -> list:
    asyncio.run(ensure_pools())
    ids = []
    for dep, pool in deployments():
        ids += deploy(dep, work_pool_name=pool, build=False, push=False, print_next_steps_message=False)
    return ids


if __name__ == "__main__":
    for deployment_id in main():
        print(deployment_id)
