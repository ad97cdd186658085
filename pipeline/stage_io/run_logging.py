"""What the base-model and training stages log into their MLflow run: the weights, registered as a
model, their hash, the audits and the curves (the helpers are pipeline.tracking.artifacts; this binds
them to the stages' paths and params)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pipeline.code_version import code_version
from pipeline.config import Params
from pipeline.draws.identity import draw_tags
from pipeline.eval.run import model_fingerprint
from pipeline.provenance import git_commit
from pipeline.tracking.artifacts import KIND_TAG, WEIGHTS_SHA_TAG, log_audit, log_curves, log_model

DRAW_KEYS = ("draw.seed_set", "draw.cpu", "draw.precision", "draw.threads")  # the draw identity's tags (draw_tags)


def version_tags(root: Path, profile: str, stage: str) -> dict[str, str]:
    """A registered model version's tags: profile, stage, commit, and the draw that made the
    weights (seed set, CPU kind, precision path, code fingerprint), so that the versions of a
    draw and of the committed run never pass for one another."""
    return {"profile": profile, "stage": stage, "git_commit": git_commit(root), **draw_tags(root, profile),
            "draw.code": code_version()}


def log_weights(mlf: Any, params: Params, root: Path, folder: Path, registered_name: str, stage: str,
                kind: str = "training") -> None:
    """On the run that wrote `folder`: its kind, the weights' hash (what evaluations link by)
    and the model, registered as `registered_name` with `version_tags`."""
    mlf.set_tags({KIND_TAG: kind, WEIGHTS_SHA_TAG: model_fingerprint(folder)})
    log_model(mlf, folder, registered_name, version_tags(root, params.profile, stage),
              params.tracking.log_model_max_mb)


def log_training(mlf: Any, params: Params, root: Path, folder: Path, system: str, stage: str,
                 audit_root: Path) -> None:
    log_weights(mlf, params, root, folder, system, stage)
    log_audit(mlf, audit_root)
    log_curves(mlf)
