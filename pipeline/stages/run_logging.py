"""What the training, evaluation and report stages log into their MLflow run (the helpers
are pipeline.run_artifacts; this binds them to the stages' paths and params)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import Params
from pipeline.eval.run import model_fingerprint
from pipeline.run_artifacts import KIND_TAG, WEIGHTS_SHA_TAG, link_weights, log_audit, log_curves, log_model
from pipeline.tracking import git_commit

REPORT_FILES = ("paper.html", "paper.md", "main_table.tex")
REPORT_FOLDERS = ("figures", "curves", "plots", "metrics")


def log_weights(mlf: Any, params: Params, root: Path, folder: Path, registered_name: str, stage: str,
                kind: str = "training") -> None:
    """On the run that wrote `folder`: its kind, the weights' hash (what evaluations link by)
    and the model, registered as `registered_name` with the profile, commit and stage as
    version tags."""
    mlf.set_tags({KIND_TAG: kind, WEIGHTS_SHA_TAG: model_fingerprint(folder)})
    log_model(mlf, folder, registered_name,
              {"profile": params.profile, "git_commit": git_commit(root), "stage": stage},
              params.tracking.log_model_max_mb)


def log_training(mlf: Any, params: Params, root: Path, folder: Path, system: str, stage: str,
                 audit_root: Path) -> None:
    log_weights(mlf, params, root, folder, system, stage)
    log_audit(mlf, audit_root)
    log_curves(mlf)


def log_evaluation(mlf: Any, records: Path, weights_sha256: str, system: str | None = None) -> None:
    """The records, and the run that wrote the evaluated weights (the run of `system` when
    two runs wrote the same weights)."""
    mlf.set_tag(KIND_TAG, "evaluation")
    mlf.log_artifact(str(records), artifact_path="records")
    link_weights(mlf, weights_sha256, system)


def log_report(mlf: Any, folder: Path, metrics: Path) -> None:
    """The report folder as the browser sees it: paper.html embeds its figures."""
    mlf.set_tag(KIND_TAG, "report")
    mlf.log_artifact(str(metrics))
    for name in REPORT_FILES:
        if (folder / name).is_file():
            mlf.log_artifact(str(folder / name))
    for name in REPORT_FOLDERS:
        if (folder / name).is_dir():
            mlf.log_artifacts(str(folder / name), artifact_path=name)
