"""Register the deployments (shown in the Prefect UI) on the CPU and GPU work pools.

    prefect work-pool create cpu --type process
    prefect work-pool create gpu --type process      # workers on GPU machines, Dockerfile image
    python -m flows.deploy                           # registers the deployments below
    prefect worker start --pool cpu                  # and one per GPU machine: --pool gpu

The nightly schedule rebuilds the paper; DVC skips every stage whose inputs did not change.
"""

from __future__ import annotations

from prefect import deploy

from flows.stages import paper_flow, stage_flow

CPU_POOL = "cpu"
GPU_POOL = "gpu"


def deployments():
    return [
        paper_flow.to_deployment(name="paper-nightly", cron="0 2 * * *", tags=["paper"]),
        stage_flow.to_deployment(name="stage-cpu", tags=["cpu"]),
        stage_flow.to_deployment(name="stage-gpu", tags=["gpu"]),
    ]


def main() -> None:
    paper, cpu, gpu = deployments()
    deploy(paper, cpu, work_pool_name=CPU_POOL, build=False, push=False)
    deploy(gpu, work_pool_name=GPU_POOL, build=False, push=False)


if __name__ == "__main__":
    main()
