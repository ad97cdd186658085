"""A hash of the pipeline's own source, part of what resumable work must match to be resumed.

DVC re-runs a stage when its code changes, but a training checkpoint or a finished evaluation
shard on disk is not a DVC output: without this hash, the re-run would continue (or simply
reuse) work the old code did, and record it as the new code's.
"""

from __future__ import annotations

import functools
from pathlib import Path

from pipeline.io import hash_files

PACKAGE = Path(__file__).resolve().parent
SOURCE_SUFFIXES = (".py", ".yaml")  # the code and the prompts it reads


def source_hash(package: Path) -> str:
    """sha256 (16 hex digits) over the path, size and content of every source file under `package`."""
    package = Path(package)
    names = sorted(p.relative_to(package).as_posix() for p in package.rglob("*")
                   if p.is_file() and p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts)
    return hash_files(package, names)[:16]


@functools.cache
def code_version() -> str:
    """The source hash of this package, once per process."""
    return source_hash(PACKAGE)
