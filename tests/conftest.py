"""Shared fixtures: the repository root and the real-data folder (skipped when absent)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

# Prefect's temporary server logs its shutdown after pytest has closed the output streams;
# keep its loggers at WARNING so the run ends on pytest's summary line.
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_LOGGING_LEVEL", "WARNING")

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_DATA_ENV = "MAOPD_REAL_DATA"  # a folder of small real public QA sets and corpora (.ci/run sets it)


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def real_data() -> Path:
    folder = os.environ.get(REAL_DATA_ENV, "")
    if not folder or not Path(folder).is_dir():
        pytest.skip(f"${REAL_DATA_ENV} does not name a folder of real data ({folder!r})")
    return Path(folder)


@pytest.fixture
def torch_one_thread():
    """torch on one thread for the test, restored after it."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def build_ci_data(root: Path, mp: pytest.MonkeyPatch):
    """The ci profile's splits and corpus under `root`, MLflow tracked into `root` (set on `mp`,
    which the caller undoes); returns the ci params."""
    from pipeline.config import load_params
    from pipeline.stages.corpus import run_corpus
    from pipeline.stages.splits import run_splits

    mp.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{root / 'mlflow.db'}")
    params = load_params(REPO_ROOT / "params.yaml", profile="ci")
    run_splits(params, root)
    run_corpus(params, root)
    return params
