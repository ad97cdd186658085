"""The GPU worker image definition passes hadolint (no Docker engine here to build it)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO_ROOT


def _hadolint() -> str:
    local = Path(sys.executable).with_name("hadolint")
    found = str(local) if local.exists() else shutil.which("hadolint")
    if not found:
        pytest.skip("hadolint is not installed")
    return found


def test_dockerfile_lints_clean():
    proc = subprocess.run([_hadolint(), str(REPO_ROOT / "Dockerfile")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_dockerfile_installs_the_gpu_stack():
    text = (REPO_ROOT / "Dockerfile").read_text()
    for package in ("sglang", "faiss-gpu", "requirements", "prefect"):
        assert package in text
