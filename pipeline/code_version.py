"""A hash of the pipeline's own source, part of what a resumable stage must match to resume.

DVC re-runs a stage when its code changes, but a training checkpoint or a finished evaluation
shard on disk is not a DVC output: without this hash, the re-run would continue (or simply
reuse) work the old code did, and record it as the new code's.
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path

PACKAGE = Path(__file__).resolve().parent
SOURCE_SUFFIXES = (".py", ".yaml")  # the code and the prompts it reads


def source_hash(package: Path) -> str:
    """sha256 (16 hex digits) over the path and content of every source file under `package`."""
    digest = hashlib.sha256()
    files = sorted(p for p in Path(package).rglob("*")
                   if p.is_file() and p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts)
    for path in files:
        digest.update(path.relative_to(package).as_posix().encode() + b"\0")
        digest.update(path.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def code_version() -> str:
    """The source hash of this package, once per process."""
    return source_hash(PACKAGE)
