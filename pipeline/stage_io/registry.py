"""Which module of pipeline/stages/ runs each DVC stage: read by the stages' package (to run one)
and by pipeline.dag (to write dvc.yaml), so neither imports the other."""

from __future__ import annotations

# stage -> its module under pipeline/stages/ (the function is `run_<stage>`); `train` and
# `evaluate` take a system name (pipeline.systems), the others nothing
STAGE_MODULES: dict[str, str] = {
    "splits": "splits",
    "corpus": "corpus",
    "validate_splits": "validate_splits",
    "index": "index",
    "base_model": "base_model",
    "validate_masks": "validate_masks",
    "stage2_start": "stage2_start",
    "train": "train",
    "evaluate": "evaluate",
    "report": "report",
}
TAKES_SYSTEM = ("train", "evaluate")
