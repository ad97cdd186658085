"""Answer "is there anything for `dvc repro` to do?" from file metadata, in a fraction of a second.

A no-op `dvc repro` takes about 3 s here (docs/profile.md#a-no-op-dvc-repro): DVC parses
params.yaml once per stage and dvc.lock twice, and edits its read/write lock file around every
stage, before it finds nothing changed. `make repro` asks this module first. After a successful
`dvc repro` (and the MLflow records that follow it) the stamp stores the size, modification time
and inode of every file DVC would look at: dvc.yaml, dvc.lock, params.yaml, DVC's config, every
dependency and output that dvc.lock names, every file and folder inside a folder among them (a
file added to or removed from a folder changes the folder's modification time), the MLflow
store, and DVC's own package. If all are unchanged, DVC would find nothing to do; any
difference, a missing file or a missing or unreadable stamp sends the caller to `dvc repro`.
This is the test DVC itself uses before it re-hashes a file (its state database keys hashes by
inode, modification time and size), so it trusts no more than DVC does.
"""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass
from pathlib import Path

STAMP = Path(".dvc") / "tmp" / "maopd-up-to-date.json"
PROJECT_FILES = ("dvc.yaml", "dvc.lock", "params.yaml", ".dvc/config", ".dvc/config.local", ".dvcignore", "mlflow.db")
FORMAT = 1


@dataclass(frozen=True)
class Verdict:
    current: bool
    reason: str


def _lock_paths(root: Path) -> list[str]:
    """Every dependency and output path dvc.lock names for the stages of dvc.yaml (params files
    included)."""
    from pipeline.record_runs import lock_entries

    paths: set[str] = set()
    for entry in lock_entries(root).values():
        paths.update(item["path"] for item in (entry.get("deps") or []) + (entry.get("outs") or []))
        paths.update((entry.get("params") or {}).keys())
    return sorted(paths)


def _dvc_package() -> list[str]:
    """DVC's own package file: an upgraded DVC may judge the same files differently."""
    spec = importlib.util.find_spec("dvc")
    return [spec.origin] if spec and spec.origin else []


def _expand(root: Path, relative: list[str]) -> list[str]:
    """The paths, with every file and folder below each folder among them."""
    out: list[str] = []
    for rel in relative:
        out.append(rel)
        top = root / rel
        if top.is_dir() and not top.is_symlink():
            for folder, dirs, files in os.walk(top):
                dirs.sort()
                base = Path(folder).relative_to(root)
                out.extend(str(base / name) for name in sorted(dirs) + sorted(files))
    return out


def _signature(root: Path, rel: str) -> list[int] | None:
    try:
        st = os.stat(root / rel)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns, st.st_ino]


def record(root: Path) -> Path:
    """Write the stamp after a successful `dvc repro`; returns its path."""
    from pipeline.io import write_text

    watched = list(PROJECT_FILES) + _lock_paths(root)
    signatures = {rel: _signature(root, rel) for rel in _expand(root, watched)}
    signatures |= {path: _signature(root, path) for path in _dvc_package()}
    path = root / STAMP
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text(path, json.dumps({"format": FORMAT, "files": signatures}, sort_keys=True))
    return path


def check(root: Path) -> Verdict:
    """Whether nothing DVC looks at changed since the stamp was written, and why not."""
    try:
        stamp = json.loads((root / STAMP).read_text(encoding="utf-8"))
        files = stamp["files"] if stamp.get("format") == FORMAT else None
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        files = None
    if not isinstance(files, dict) or not files:
        return Verdict(False, f"no readable stamp at {STAMP}")
    for rel, signature in files.items():
        if _signature(root, rel) != signature:
            return Verdict(False, f"{rel} changed since the last `make repro`")
    return Verdict(True, "nothing DVC checks changed since the last `make repro`")


def forget(root: Path) -> None:
    """Remove the stamp (before `dvc repro` runs, so that a failed run leaves none)."""
    (root / STAMP).unlink(missing_ok=True)
