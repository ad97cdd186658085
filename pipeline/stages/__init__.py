"""One plain function per DVC stage: `run_<stage>(params, root) -> summary dict`.

The CLI, dvc.yaml and the Prefect flows are thin shells around this registry.
"""

from __future__ import annotations

from typing import Callable

from pipeline.stages import data_stages

STAGES: dict[str, Callable] = {
    "splits": data_stages.run_splits,
    "corpus": data_stages.run_corpus,
    "validate_splits": data_stages.run_validate_splits,
    "index": data_stages.run_index,
}
