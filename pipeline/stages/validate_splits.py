"""Stage `validate_splits`: Great Expectations on the splits (no leakage, exact quotas, no empty
question or answer, unique ids) with Data Docs; fails the stage on any failed expectation."""

from __future__ import annotations

from pathlib import Path

from pipeline.config import Params
from pipeline.errors import ValidationFailed
from pipeline.io import write_json
from pipeline.paths import Paths
from pipeline.stage_io.inputs import read_split
from pipeline.tracking.artifacts import log_data_docs
from pipeline.tracking.runs import stage_run


def log_validation(mlf, summary: Path, docs_dir: Path) -> None:
    """The outcome (metrics success and failures, the summary file) and the Data Docs site."""
    import json

    outcome = json.loads(summary.read_text())
    mlf.log_metrics({"success": float(outcome["success"]), "failures": len(outcome["failures"])})
    mlf.log_artifact(str(summary))
    log_data_docs(mlf, docs_dir)


def run_validate_splits(params: Params, root: Path) -> dict:
    from pipeline.validate.splits import validate_splits

    paths = Paths(root)
    with stage_run("validate_splits", params.profile, root=root) as mlf:
        frames = {name: read_split(root, name) for name in ("train", "dev", "test")}
        docs_dir = paths.reports(params.profile) / "data_docs" / "splits"
        outcome = validate_splits(
            frames["train"], frames["dev"], frames["test"], dict(params.data.test_quotas), docs_dir
        )
        results = dict(outcome.results)
        docs = Path(results.get("data_docs", ""))
        if docs.is_absolute() and docs.is_relative_to(root.resolve()):
            results["data_docs"] = docs.relative_to(root.resolve()).as_posix()  # no machine path in an output
        summary = {"success": outcome.success, "failures": outcome.failures, "results": results}
        out = paths.validation / "splits.json"
        write_json(out, summary)
        log_validation(mlf, out, docs_dir)
    if not outcome.success:
        raise ValidationFailed("validate_splits", outcome.failures)
    return {"success": True}
