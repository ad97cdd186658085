"""One plain function per DVC stage: `run_<stage>(params, root) -> summary dict`.

The CLI, dvc.yaml and the Prefect flows are thin shells around this registry.
"""

from __future__ import annotations

from typing import Callable

from pipeline.stages import audit_stages, data_stages, eval_stages, model_stages, train_stages

STAGES: dict[str, Callable] = {
    "splits": data_stages.run_splits,
    "corpus": data_stages.run_corpus,
    "validate_splits": data_stages.run_validate_splits,
    "index": data_stages.run_index,
    "base_model": model_stages.run_base_model,
    "validate_masks": audit_stages.run_validate_masks,
    "teacher": train_stages.run_teacher,
    "team": train_stages.run_team,
    "ablation": train_stages.run_ablation,
    "prompted_critic": train_stages.run_prompted_critic,
    "evaluate": eval_stages.run_evaluate,
    "report": eval_stages.run_report,
}
