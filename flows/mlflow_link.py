"""The MLflow run a stage produced, so a Prefect task can point at it (no Prefect here): the run
its record names (data/runs/<stage>.json in the run root, pipeline.tracking.stage_record), the
one that made the stage's outputs there, never "the newest run of this stage"."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.tracking.links import run_url
from pipeline.tracking.stage_record import read_record


@dataclass(frozen=True)
class StageRun:
    run_id: str
    experiment_id: str
    url: str


def recorded_stage_run(root: Path, stage: str) -> StageRun | None:
    """The run the record of `stage` under `root` names; None when the stage has no record there
    (it has not run, or its run did not end FINISHED)."""
    record = read_record(root, stage)
    if record is None:
        return None
    return StageRun(record.run_id, record.experiment_id, run_url(record.experiment_id, record.run_id))
