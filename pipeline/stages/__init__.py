"""One plain function per DVC stage: `run_<stage>(params, root) -> summary dict`.

The CLI, dvc.yaml and the Prefect flows are thin shells around this registry.
"""

from __future__ import annotations

import importlib
from typing import Callable


def _stage(module: str, function: str) -> Callable:
    """`pipeline.stages.<module>.<function>`, imported when called: a stage pays only for its
    own imports (the evaluation, for one, never loads the trainer or Great Expectations)."""

    def run(*args, **kwargs):
        return getattr(importlib.import_module(f"pipeline.stages.{module}"), function)(*args, **kwargs)

    run.__name__ = run.__qualname__ = function
    return run


STAGES: dict[str, Callable] = {
    "splits": _stage("data_stages", "run_splits"),
    "corpus": _stage("data_stages", "run_corpus"),
    "validate_splits": _stage("data_stages", "run_validate_splits"),
    "index": _stage("data_stages", "run_index"),
    "base_model": _stage("model_stages", "run_base_model"),
    "validate_masks": _stage("audit_stages", "run_validate_masks"),
    "teacher": _stage("train_stages", "run_teacher"),
    "team": _stage("train_stages", "run_team"),
    "ablation": _stage("train_stages", "run_ablation"),
    "prompted_critic": _stage("train_stages", "run_prompted_critic"),
    "evaluate": _stage("eval_stages", "run_evaluate"),
    "report": _stage("eval_stages", "run_report"),
}
