"""A scratch copy of the repository (tracked and untracked-but-not-ignored files, no data/)
with a chosen profile: what benchmarks and end-to-end tests run `dvc repro` in.

reports/ holds outputs and is left out, except the profile's kept draws (reports/<profile>/draws/):
they are an input of the `report` stage, and DVC refuses to run a stage whose dep is missing."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from pipeline.params_edit import edit_file

REPO_ROOT = Path(__file__).resolve().parents[1]


def copy_repo(dest: Path, profile: str, root: Path = REPO_ROOT) -> Path:
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard"], cwd=root,
                           capture_output=True, text=True, check=True).stdout.splitlines()
    draws = f"reports/{profile}/draws/"
    for rel in files:
        src = root / rel
        if src.is_file() and (rel.startswith(draws) or not rel.startswith(("data/", "reports/"))):
            (dest / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dest / rel)
    (dest / draws).mkdir(parents=True, exist_ok=True)
    edit_file(dest / "params.yaml", {"profile": profile})
    (dest / "dvc.lock").unlink(missing_ok=True)
    subprocess.run(["git", "init", "-q"], cwd=dest, check=True)
    return dest
