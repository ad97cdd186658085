"""Which commit holds the code the stages ran: the checkout's commit, `-dirty` when a file the
stages depend on differs from it.

"The stages depend on" means the DVC deps of dvc.yaml that are not stage outputs (the code under
pipeline/ each stage imports), with params.yaml and dvc.yaml themselves. An edit to the docs,
the tests, the README or a report leaves the provenance clean: no stage reads them.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import yaml

COMMIT_ENV = "MAOPD_GIT_COMMIT"  # wins, for stages run in a copy of the checkout that is not a git repo
ALWAYS = ("params.yaml", "dvc.yaml")
FALLBACK = ("pipeline", "configs")  # without a readable dvc.yaml: the whole package and its configs
OUTPUT_ROOTS = ("data/", "reports/")  # deps under these are other stages' outputs, not code


def _deps(body: dict) -> list[str]:
    return [str(d) for d in (body.get("deps") or []) if isinstance(d, str)]


def code_paths(root: Path) -> list[str]:
    """The paths whose state the commit describes (module doc), sorted."""
    try:
        stages = (yaml.safe_load((root / "dvc.yaml").read_text()) or {}).get("stages") or {}
    except (OSError, yaml.YAMLError):
        stages = None
    if not isinstance(stages, dict):
        return sorted({*ALWAYS, *FALLBACK})
    paths = set(ALWAYS)
    for body in stages.values():
        if not isinstance(body, dict):
            continue
        for dep in _deps(body.get("do") if isinstance(body.get("do"), dict) else body):
            if "${" not in dep and not dep.startswith(OUTPUT_ROOTS):
                paths.add(dep)
    return sorted(paths)


def git_commit(root: Path) -> str:
    """`<sha>` of the checkout's HEAD, `<sha>-dirty` when a code path (code_paths) has changes or
    new files against it, `unknown` outside a git checkout or before its first commit;
    MAOPD_GIT_COMMIT wins."""
    if os.environ.get(COMMIT_ENV):
        return os.environ[COMMIT_ENV]
    root = Path(root)
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10)
        sha = out.stdout.strip() if out.returncode == 0 else ""  # no commit yet: git prints "HEAD"
        if not sha:
            return "unknown"
        dirty = subprocess.run(["git", "status", "--porcelain", "--", *code_paths(root)],
                               cwd=root, capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
