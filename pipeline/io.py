"""Atomic writers: every artifact is written to a temporary sibling and renamed into place,
so a killed stage never leaves a half-written file behind. Temporary files and folders are
created with the process umask (0644 / 0755 under the usual umask 022), like any file the
stage would write directly, and the leftovers of a write cut by a kill are cleaned on the
next write of the same path. `read_parquet` and `read_text` turn an unreadable input into an InputError."""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import secrets
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.errors import InputError

_HASH_CHUNK = 1 << 20  # bytes read at a time by hash_files

# `.<name>.<8 characters>.tmp`: a write in progress (or cut by a kill); `.<name>.old`: the
# previous version of a folder during its swap
_TMP_NAME = re.compile(r"^\.(?P<name>.+)\.[A-Za-z0-9_]{8}\.tmp$")
_OLD_NAME = re.compile(r"^\.(?P<name>.+)\.old$")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


def recover_interrupted(path: str | os.PathLike) -> None:
    """Undo what a killed write of `path` left: temporary siblings are removed; a folder
    moved aside for its swap (`.<name>.old`) goes back to `path` if the new version never
    arrived, and is removed otherwise."""
    path = Path(path)
    if not path.parent.is_dir():
        return
    old = path.with_name(f".{path.name}.old")
    if old.exists():
        if path.exists():
            _remove(old)
        else:
            os.replace(old, path)
    for child in path.parent.iterdir():
        m = _TMP_NAME.match(child.name)
        if m and m.group("name") == path.name:
            _remove(child)


def recover_interrupted_in(folder: str | os.PathLike) -> None:
    """recover_interrupted for every path of `folder` that has leftovers."""
    folder = Path(folder)
    if not folder.is_dir():
        return
    names = set()
    for child in folder.iterdir():
        m = _TMP_NAME.match(child.name) or _OLD_NAME.match(child.name)
        if m:
            names.add(m.group("name"))
    for name in sorted(names):
        recover_interrupted(folder / name)


def _temp_sibling(path: Path, make) -> Path:
    """A new `.<name>.<random>.tmp` next to `path`, made by `make(tmp)` (which applies the umask)."""
    while True:
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            make(tmp)
            return tmp
        except FileExistsError:
            continue


def _new_file(tmp: Path) -> None:
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))


def _new_dir(tmp: Path) -> None:
    os.mkdir(tmp, 0o777)


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path next to `path`; on success rename it onto `path`."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_interrupted(path)
    tmp_path = _temp_sibling(path, _new_file)
    try:
        yield tmp_path
        os.replace(tmp_path, path)
    finally:
        if tmp_path.exists():
            tmp_path.unlink()


@contextlib.contextmanager
def atomic_dir(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary directory next to `path`; on success it replaces `path` whole."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    recover_interrupted(path)
    tmp = _temp_sibling(path, _new_dir)
    try:
        yield tmp
        if path.exists():
            old = path.with_name(f".{path.name}.old")
            os.replace(path, old)
            os.replace(tmp, path)
            shutil.rmtree(old)
        else:
            os.replace(tmp, path)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp)


def read_text(path: str | os.PathLike) -> str:
    """The text of `path`; an InputError naming it when it cannot be read."""
    try:
        return Path(path).read_text()
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror})") from None


def write_json(path: str | os.PathLike, obj: Any) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(json.dumps(obj, indent=2, sort_keys=True, default=str) + "\n")


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text)


def write_parquet(path: str | os.PathLike, df: pd.DataFrame) -> None:
    """Deterministic parquet: same frame gives byte-identical files."""
    with atomic_path(path) as tmp:
        df.to_parquet(tmp, index=False, compression="zstd")


def read_parquet(path: str | os.PathLike, made_by: str) -> pd.DataFrame:
    """A parquet input; a missing, empty, truncated or foreign file is an InputError naming the
    file, what pyarrow found and what makes the file (`made_by`, e.g. "the `splits` stage")."""
    import pyarrow as pa

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: not found; expected a parquet file made by {made_by}")
    try:
        return pd.read_parquet(path)
    except (pa.ArrowException, OSError, ValueError) as e:
        reason = str(e).replace(f"Could not open Parquet input source '{path}': ", "")
        raise InputError(f"{path}: not a readable parquet file ({reason}); expected the output of {made_by}, "
                         "rerun it") from None


def parquet_rows(path: str | os.PathLike, made_by: str) -> int:
    """The row count of a parquet input, from its footer; errors as read_parquet's."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = Path(path)
    try:
        return pq.ParquetFile(path).metadata.num_rows
    except (pa.ArrowException, OSError, ValueError) as e:
        raise InputError(f"{path}: not a readable parquet file ({e}); expected the output of {made_by}, "
                         "rerun it") from None


def hash_files(folder: str | os.PathLike, files: list[str]) -> str:
    """sha256 over (name, size, content) of each file in order, read in 1 MiB chunks."""
    folder = Path(folder)
    digest = hashlib.sha256()
    for name in files:
        path = folder / name
        digest.update(f"{name}\0{path.stat().st_size}\0".encode())
        with path.open("rb") as handle:
            while chunk := handle.read(_HASH_CHUNK):
                digest.update(chunk)
    return digest.hexdigest()
