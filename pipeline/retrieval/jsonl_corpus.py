"""A FlashRAG / Search-R1 corpus (`wiki-18.jsonl`: one {"id", "contents"} object a line) read
in place: one pass finds where every line starts (an offset table, 8 bytes a passage), the file
is memory-mapped, and a passage is parsed only when a search returns it. Row i is the i-th
non-blank line, as in the flat index built from the file."""

from __future__ import annotations

import json
import mmap
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from pipeline.errors import InputError
from pipeline.retrieval.contents import split_contents

SCAN_BYTES = 64 * 1024 * 1024  # file read this much at a time while finding the lines


def line_starts(path: Path, scan_bytes: int = SCAN_BYTES) -> np.ndarray:
    """Byte offsets of the non-blank lines of `path` (int64), in one sequential pass."""
    starts: list[np.ndarray] = [np.zeros(1, np.int64)]
    base = 0
    with path.open("rb") as handle:
        while chunk := handle.read(scan_bytes):
            newlines = np.flatnonzero(np.frombuffer(chunk, np.uint8) == 10)
            starts.append(newlines.astype(np.int64) + base + 1)
            base += len(chunk)
    every = np.concatenate(starts)  # line i spans every[i] .. every[i + 1] - 1 (its newline)
    ends = np.append(every[1:] - 1, base)
    keep = (ends - every) > 0
    keep &= every < base
    short = np.flatnonzero(keep & ((ends - every) <= 2))  # "\r" or " " alone: blank too
    if len(short):
        with path.open("rb") as handle:
            for i in short:
                handle.seek(int(every[i]))
                if not handle.read(int(ends[i] - every[i])).strip():
                    keep[i] = False
    return every[keep]


class JsonlCorpus:
    """Passages of a jsonl corpus by row number, without holding the corpus in memory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: corpus file not found")
        self.starts = line_starts(self.path)
        self.num_rows = len(self.starts)
        if self.num_rows == 0:
            raise InputError(f"{self.path}: no passages; expected lines {{\"id\": ..., \"contents\": \"...\"}}")
        with self.path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        for row in {0, self.num_rows // 2, self.num_rows - 1}:
            self.row(row)  # a file of another layout fails here, naming a line

    def _line_no(self, row: int) -> int:
        return self._map[:int(self.starts[row])].count(b"\n") + 1

    def _where(self, row: int) -> str:
        return f"{self.path}:{self._line_no(row)}"

    def row(self, row: int) -> dict[str, str]:
        """{"id", "title", "text"} of passage `row`."""
        start = int(self.starts[row])
        end = self._map.find(b"\n", start)
        raw = self._map[start:end if end >= 0 else len(self._map)]
        try:
            record = json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError) as err:
            raise InputError(f"{self._where(row)}: invalid JSON ({err})") from err
        if not isinstance(record, dict) or "contents" not in record or "id" not in record:
            raise InputError(f"{self._where(row)}: expected an object with 'id' and 'contents'")
        if not isinstance(record["contents"], str):
            raise InputError(f"{self._where(row)}: field 'contents' must be a string, "
                             f"got {type(record['contents']).__name__}")
        title, text = split_contents(record["contents"])
        return {"id": str(record["id"]), "title": title, "text": text}

    def rows(self, rows: Sequence[int] | np.ndarray) -> list[dict[str, str]]:
        return [self.row(int(r)) for r in rows]

    def close(self) -> None:
        self._map.close()
