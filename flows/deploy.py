"""Register the deployments (shown in the Prefect UI), their work pools and the `gpu` limit.

    make prefect-up            # server + a `cpu` worker + this script (see the README)
    python -m flows.deploy     # against any server: PREFECT_API_URL=http://host:4200/api

Deployments of the flow `maopd-paper` (`flows/stages.py:paper_flow`):
- `paper`: the paper profile on the `gpu` pool, weekly (Sunday 03:00 UTC). Its schedule is
  registered paused while no worker of the `gpu` pool is online (a scheduled run would wait
  for one forever); run this script again once one is, or resume the schedule in the UI.
  While paused, it carries the tag "schedule paused" and its description starts by saying why,
  so the UI says why it is Not Ready.
- `smoke`: the ci profile on the `cpu` pool, nightly (02:00 UTC).
Both run the whole DAG; DVC skips every stage whose inputs did not change. Any stage or
group runs alone with `-p stages='["evaluate"]'`. Workers run the flow from this checkout.

Deployment of the flow `maopd-draws` (`flows/draws.py:draws_flow`):
- `draws`: draws of the tiny profile (seed set G, precision auto) on the `cpu` pool, weekly
  (Saturday 04:00 UTC). Always registered paused, tagged "schedule paused": a draw takes about an
  hour of a machine and, once kept, changes the committed report. Resume it in the UI to run
  draws on the schedule; `-p seed_sets='["B","C"]' -p precision=float32` picks others.
"""

from __future__ import annotations

import argparse
import asyncio

from prefect import deploy
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import WorkPoolCreate
from prefect.schedules import Cron

from flows.draws import draws_flow
from flows.stages import ROOT, ensure_gpu_limit, paper_flow

POOLS = {"cpu": "data, index and report stages; the ci smoke run",
         "gpu": "base model, training and evaluation stages; the paper profile"}
DEPLOYMENTS = {
    # name: (pool, cron, parameters)
    "paper": ("gpu", "0 3 * * 0", {"profile": "paper"}),
    "smoke": ("cpu", "0 2 * * *", {"profile": "ci"}),
}
# The draws' deployment: (name, pool, cron, parameters); its schedule is always registered paused
DRAWS = ("draws", "cpu", "0 4 * * 6", {"seed_sets": ["G"], "precision": "auto", "profile": "tiny", "replace": True})
DRAWS_PAUSED_WHY = ("**Schedule paused on purpose: a draw takes about an hour of a machine, and a kept draw "
                    "changes the committed report** (reports/<profile>/draws/). Resume the schedule here to run "
                    "draws weekly; *Run* starts one now.")
# shown beside the deployment in the UI's list, where only short tags fit (longer ones fold into "+N")
PAUSED_TAG = "schedule paused"
GPU_SLOTS = 1  # the `gpu` limit's slots when this script creates it (the flow's gpu_slots default)


async def ensure_pools() -> None:
    async with get_client() as client:
        existing = {p.name for p in await client.read_work_pools()}
        for name, description in POOLS.items():
            if name not in existing:
                await client.create_work_pool(WorkPoolCreate(name=name, type="process", description=description))


async def online_pools() -> set[str]:
    """The pools with at least one online worker."""
    async with get_client() as client:
        found = set()
        for pool in POOLS:
            workers = await client.read_workers_for_work_pool(pool)
            if any(str(getattr(w.status, "value", w.status)).upper() == "ONLINE" for w in workers):
                found.add(pool)
        return found


def deployments(online: set[str] | None = None) -> list[tuple]:
    """(deployment, pool) pairs, the flow loaded from this checkout by the workers. A schedule
    whose pool has no online worker (`online`; None: assume every pool has one) is paused,
    and the deployment's description says why."""
    source = paper_flow.from_source(source=str(ROOT), entrypoint="flows/stages.py:paper_flow")
    built = []
    for name, (pool, cron, parameters) in DEPLOYMENTS.items():
        active = online is None or pool in online
        description = f"{parameters['profile']} profile, whole DAG, on the {pool} pool."
        tags = [pool]
        if not active:
            description = (f"**Schedule paused on purpose: no worker of the `{pool}` pool is online**, so a "
                           f"scheduled run would wait for one; Prefect shows the deployment Not Ready for the "
                           f"same reason. Start one (`prefect worker start --pool {pool}`; for `gpu` the "
                           f"Dockerfile's image), then run `python -m flows.deploy` again or resume the schedule "
                           f"here. " + description)
            tags.append(PAUSED_TAG)
        built.append((source.to_deployment(name=name, schedules=[Cron(cron, timezone="UTC", active=active)],
                                           parameters=parameters, tags=tags, description=description),
                      pool))
    built.append((draws_deployment(), DRAWS[1]))
    return built


def draws_deployment():
    """`draws`: the flow maopd-draws on the cpu pool, its weekly schedule always paused (DRAWS_PAUSED_WHY)."""
    name, pool, cron, parameters = DRAWS
    source = draws_flow.from_source(source=str(ROOT), entrypoint="flows/draws.py:draws_flow")
    description = (f"{DRAWS_PAUSED_WHY} Each draw (seed sets {', '.join(parameters['seed_sets'])}, precision "
                   f"{parameters['precision']}) runs the whole {parameters['profile']} DAG in its own workspace "
                   f"(.maopd/draws/), one after another, on the {pool} pool, and is kept in "
                   f"reports/{parameters['profile']}/draws/ (docs/usage.md#draws).")
    return source.to_deployment(name=name, schedules=[Cron(cron, timezone="UTC", active=False)],
                                parameters=parameters, tags=[pool, PAUSED_TAG], description=description)


def main(argv: list[str] | None = None) -> list:
    parser = argparse.ArgumentParser(prog="python -m flows.deploy", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--worker-starting", action="append", default=[], choices=sorted(POOLS), metavar="POOL",
                        help="a pool whose worker is being started alongside (counts as online)")
    args = parser.parse_args(argv)
    asyncio.run(ensure_pools())
    ensure_gpu_limit(GPU_SLOTS)
    online = asyncio.run(online_pools()) | set(args.worker_starting)
    ids = []
    for dep, pool in deployments(online):
        ids += deploy(dep, work_pool_name=pool, build=False, push=False, print_next_steps_message=False)
        if dep.name == DRAWS[0]:
            state = "paused (always: resume it in the UI)"
        else:
            state = "active" if pool in online else "paused (no online worker)"
        print(f"deployment {dep.flow_name}/{dep.name} on pool {pool}: schedule {state}")
    return ids


if __name__ == "__main__":
    main()
