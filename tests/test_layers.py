"""The package layers of pyproject.toml's import-linter contracts hold, and an upward import breaks them."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from tests.conftest import REPO_ROOT

LINT_IMPORTS = str(Path(sys.executable).with_name("lint-imports"))


def _lint(root: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(root)}
    return subprocess.run([LINT_IMPORTS, "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_import_contract_is_kept():
    out = _lint(REPO_ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout


def test_an_upward_import_breaks_the_layers(tmp_path):
    for name in ("pipeline", "flows"):
        shutil.copytree(REPO_ROOT / name, tmp_path / name, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO_ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    (tmp_path / "pipeline" / "data" / "upward.py").write_text("import pipeline.rl.trainer  # noqa: F401\n")
    out = _lint(tmp_path)
    assert out.returncode != 0
    assert "pipeline layers BROKEN" in out.stdout and "pipeline.data.upward -> pipeline.rl.trainer" in out.stdout
