"""Which MLflow run made a stage's outputs, as a DVC output of that stage: data/runs/<stage>.json.

Every stage writes its record when its run ends FINISHED: the run's id and experiment, and the
identity of the draw that made the outputs (seed set, CPU kind, precision path, the code's
commit and source fingerprint). DVC tracks the file like any output, so it travels with the
outputs it describes (restored from the DVC cache, it still names the run that made them), and
a later stage that reads it states the run it depends on. Links name these ids
(pipeline.tracking.links), never "the newest run of this name"; the report and a draw's record
read the identity from here, so re-making only the report elsewhere relabels nothing.

The file names a run of one MLflow store: two makings of the same outputs write different ids,
so it is provenance, not a result (docs/design.md, "Every number from its own run").
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from pipeline.errors import InputError
from pipeline.io import write_json

RUNS_DIR = Path("data") / "runs"
SCHEMA = 1


def record_path(root: Path, stage: str) -> Path:
    """data/runs/<stage>.json, a foreach stage's under its group: data/runs/train/c_mas_rl.json."""
    group, _, key = stage.partition("@")
    return Path(root) / RUNS_DIR / (f"{group}/{key}.json" if key else f"{stage}.json")


@dataclass(frozen=True)
class StageRecord:
    stage: str
    run_id: str
    experiment_id: str
    experiment: str
    profile: str
    seed_set: str
    cpu: str
    precision: str
    commit: str  # pipeline.provenance.git_commit of the checkout the stage ran in
    code: str  # pipeline.code_version: the source hash of the pipeline package
    threads: str = ""  # the stage's torch threads (empty: not recorded)
    # its threads as the draw's identity names them ('2'; '4 (profile: 2)' when not the profile's)
    threads_label: str = ""

    def identity(self) -> dict[str, str]:
        return {"seed_set": self.seed_set, "cpu": self.cpu, "precision": self.precision,
                "threads": self.threads_label or self.threads or "unknown"}


OPTIONAL = ("threads", "threads_label")  # fields older records lack


def write_record(root: Path, record: StageRecord) -> Path:
    path = record_path(root, record.stage)
    write_json(path, {"schema": SCHEMA, **asdict(record)})
    return path


def read_record(root: Path, stage: str) -> StageRecord | None:
    """The record of `stage`, or None when its file does not exist (the stage has not run in this
    checkout); InputError naming the file and the field when it is not a record."""
    path = record_path(root, stage)
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as err:
        raise InputError(f"{path}: not valid JSON ({err}); the stage `{stage}` writes it, re-run it") from None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise InputError(f"{path}: field 'schema': expected {SCHEMA} (a stage record), got "
                         f"{data.get('schema') if isinstance(data, dict) else type(data).__name__!r}")
    values = {}
    for f in fields(StageRecord):
        value = data.get(f.name, f.default if f.name in OPTIONAL else None)
        if not isinstance(value, str):
            raise InputError(f"{path}: field '{f.name}': expected a string, got {value!r}")
        values[f.name] = value
    if values["stage"] != stage:
        raise InputError(f"{path}: field 'stage': expected {stage!r}, got {values['stage']!r}")
    return StageRecord(**values)


def read_records(root: Path, stages: Iterable[str]) -> dict[str, StageRecord]:
    """{stage: record} of the stages of `stages` that have one."""
    out = {}
    for stage in stages:
        record = read_record(root, stage)
        if record is not None:
            out[stage] = record
    return out


def joint_identity(records: Mapping[str, StageRecord]) -> dict[str, str]:
    """The seed set, CPU kind, precision path and threads of the stages that made a run's outputs: one
    value each when every stage agrees, else 'mixed: a; b' (some stages made elsewhere), and
    'unknown' without any record."""
    out = {}
    for key in ("seed_set", "cpu", "precision", "threads"):
        values = sorted({r.identity()[key] for r in records.values()})
        out[key] = values[0] if len(values) == 1 else ("mixed: " + "; ".join(values) if values else "unknown")
    return out
