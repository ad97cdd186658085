"""Register the deployments (shown in the Prefect UI) and their work pools.

    make prefect-up            # server + a `cpu` worker + this script (see the README)
    python -m flows.deploy     # against any server: PREFECT_API_URL=http://host:4200/api

Deployments of the flow `maopd-paper` (`flows/stages.py:paper_flow`):
- `paper`: the paper profile on the `gpu` pool, weekly (Sunday 03:00 UTC);
- `smoke`: the ci profile on the `cpu` pool, nightly (02:00 UTC).
Both run the whole DAG; DVC skips every stage whose inputs did not change. Any stage or
group runs alone with `-p stages='["evaluate"]'`. Workers run the flow from this checkout.
"""

from __future__ import annotations

import asyncio

from prefect import deploy
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate

from flows.stages import ROOT, paper_flow

POOLS = {"cpu": "data, index and report stages; the ci smoke run",
         "gpu": "base model, training and evaluation stages; the paper profile"}
DEPLOYMENTS = {
    # name: (pool, cron, parameters)
    "paper": ("gpu", "0 3 * * 0", {"profile": "paper"}),
    "smoke": ("cpu", "0 2 * * *", {"profile": "ci"}),
}


async def ensure_pools() -> None:
    async with get_client() as client:
        existing = {p.name for p in await client.read_work_pools()}
        for name, description in POOLS.items():
            if name not in existing:
                await client.create_work_pool(WorkPoolCreate(name=name, type="process", description=description))


def deployments() -> list[tuple]:
    """(deployment, pool) pairs, the flow loaded from this checkout by the workers."""
    source = paper_flow.from_source(source=str(ROOT), entrypoint="flows/stages.py:paper_flow")
    return [
        (source.to_deployment(name=name, cron=cron, parameters=parameters, tags=[pool, name],
                              description=f"{parameters['profile']} profile, whole DAG, on the {pool} pool"),
         pool)
        for name, (pool, cron, parameters) in DEPLOYMENTS.items()
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
