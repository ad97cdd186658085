"""What the base-model and training stages log into their MLflow run: the weights, registered as a
model, their hash, the audits and the curves (the helpers are pipeline.run_artifacts; this binds
them to the stages' paths and params)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.config import Params
from pipeline.eval.run import model_fingerprint
from pipeline.run_artifacts import KIND_TAG, WEIGHTS_SHA_TAG, log_audit, log_curves, log_model
from pipeline.tracking import git_commit


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
