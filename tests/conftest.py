"""Shared fixtures: the repository root and the real-data folder (skipped when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
REAL_DATA = REPO_ROOT.parent / "shared" / "data" / "real"


@pytest.fixture(scope="session")
def repo_root() -> Path:
    return REPO_ROOT


@pytest.fixture(scope="session")
def real_data() -> Path:
    if not REAL_DATA.is_dir():
        pytest.skip(f"real data folder {REAL_DATA} is absent")
    return REAL_DATA
