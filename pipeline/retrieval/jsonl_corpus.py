"""A FlashRAG / Search-R1 corpus (`wiki-18.jsonl`: one {"id", "contents"} object a line) read
in place: one pass finds where every line starts (an offset table, 8 bytes a passage), the file
is memory-mapped, and a passage is parsed only when a search returns it. Row i is the i-th
non-blank line, as in the flat index built from the file.

The same pass checks the shape of every line cheaply: each must start with "{" and end with
"}" (a line cut short, as by an interrupted copy, does not), so such a file is refused when it
opens, naming the line. A line that passes and is still not valid JSON is found when a search
returns it: a DataFault naming the file and line.
"""

from __future__ import annotations

import json
import mmap
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from pipeline.errors import DataFault, InputError
from pipeline.retrieval.contents import split_contents

SCAN_BYTES = 64 * 1024 * 1024  # file read this much at a time while finding the lines
NEWLINE, CR = 0x0A, 0x0D
OPEN, CLOSE = ord("{"), ord("}")
SPACE = b" \t\r\f\v"


@dataclass
class LineScan:
    starts: np.ndarray  # byte offset of every non-blank line (int64)
    blank: np.ndarray  # byte offsets of the blank lines, to number the others
    unbraced: np.ndarray  # indexes into `starts` of lines whose first/last byte is not { / }


def _previous_bytes(data: np.ndarray, at: np.ndarray, back: int, tail: np.ndarray) -> np.ndarray:
    """data[at - back], reaching into `tail` (the two bytes before `data`) when before 0."""
    where = at - back
    return np.where(where >= 0, data[np.maximum(where, 0)], tail[np.clip(where + 2, 0, 1)])


def scan_lines(path: Path, scan_bytes: int = SCAN_BYTES) -> LineScan:
    """Every line's start, with its first and last byte (before a "\\r"), in one sequential pass."""
    starts: list[np.ndarray] = [np.zeros(1, np.int64)]
    firsts: list[np.ndarray] = []
    lasts: list[np.ndarray] = []
    befores: list[np.ndarray] = []
    tail = np.full(2, NEWLINE, np.uint8)  # the two bytes before the chunk
    at_line_start, base = True, 0
    with path.open("rb") as handle:
        while chunk := handle.read(scan_bytes):
            data = np.frombuffer(chunk, np.uint8)
            newlines = np.flatnonzero(data == NEWLINE)
            starts.append(newlines.astype(np.int64) + base + 1)
            lasts.append(_previous_bytes(data, newlines, 1, tail))
            befores.append(_previous_bytes(data, newlines, 2, tail))
            if at_line_start:
                firsts.append(data[:1])
            firsts.append(data[newlines[newlines + 1 < len(data)] + 1])
            at_line_start = len(newlines) > 0 and int(newlines[-1]) == len(data) - 1
            tail = np.concatenate([tail, data[-2:]])[-2:]
            base += len(data)
    every = np.concatenate(starts)  # line i spans every[i] .. every[i + 1] - 1 (its newline)
    ends = np.append(every[1:] - 1, base)
    keep = ((ends - every) > 0) & (every < base)
    short = np.flatnonzero(keep & ((ends - every) <= 2))  # "\r" or " " alone: blank too
    if len(short):
        with path.open("rb") as handle:
            for i in short:
                handle.seek(int(every[i]))
                if not handle.read(int(ends[i] - every[i])).strip():
                    keep[i] = False
    first = np.concatenate([*firsts, np.full(len(every), NEWLINE, np.uint8)])[:len(every)]
    last = np.concatenate([*lasts, tail[1:]])
    last = np.where(last == CR, np.concatenate([*befores, tail[:1]]), last)
    braced = (first == OPEN) & (last == CLOSE)
    return LineScan(every[keep], every[~keep & (every < base)], np.flatnonzero(~braced[keep]))


def line_starts(path: Path, scan_bytes: int = SCAN_BYTES) -> np.ndarray:
    """Byte offsets of the non-blank lines of `path` (int64), in one sequential pass."""
    return scan_lines(path, scan_bytes).starts


class JsonlCorpus:
    """Passages of a jsonl corpus by row number, without holding the corpus in memory."""

    def __init__(self, path: str | Path) -> None:
        self.path = Path(path)
        if not self.path.is_file():
            raise InputError(f"{self.path}: corpus file not found")
        scan = scan_lines(self.path)
        self.starts, self._blank = scan.starts, scan.blank
        self.num_rows = len(self.starts)
        if self.num_rows == 0:
            raise InputError(f"{self.path}: no passages; expected lines {{\"id\": ..., \"contents\": \"...\"}}")
        with self.path.open("rb") as handle:
            self._map = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
        for row in scan.unbraced:  # usually none: lines with spaces around the object, or damaged
            line = self._line(int(row)).strip(SPACE)
            if not (line.startswith(b"{") and line.endswith(b"}")):
                raise InputError(f"{self._where(int(row))}: expected one JSON object a line "
                                 f"({{\"id\": ..., \"contents\": ...}}), got a line that starts {line[:16]!r} "
                                 f"and ends {line[-16:]!r} (cut short?)")
        for row in {0, self.num_rows // 2, self.num_rows - 1}:
            self.row(row)  # a file of another layout fails here, naming a line

    def _line_no(self, row: int) -> int:
        return row + 1 + int(np.searchsorted(self._blank, self.starts[row]))

    def _where(self, row: int) -> str:
        return f"{self.path}:{self._line_no(row)}"

    def _line(self, row: int) -> bytes:
        start = int(self.starts[row])
        end = self._map.find(b"\n", start)
        return self._map[start:end if end >= 0 else len(self._map)]

    def row(self, row: int) -> dict[str, str]:
        """{"id", "title", "text"} of passage `row`; a DataFault naming the line when it is damaged."""
        try:
            record = json.loads(self._line(row))
        except (ValueError, RecursionError) as err:  # JSON, UTF-8, an integer of over 4,300 digits
            raise DataFault(f"{self._where(row)}: invalid JSON ({err})") from err
        if not isinstance(record, dict) or "contents" not in record or "id" not in record:
            raise DataFault(f"{self._where(row)}: expected an object with 'id' and 'contents'")
        if not isinstance(record["contents"], str):
            raise DataFault(f"{self._where(row)}: field 'contents' must be a string, "
                            f"got {type(record['contents']).__name__}")
        title, text = split_contents(record["contents"])
        return {"id": str(record["id"]), "title": title, "text": text}

    def rows(self, rows: Sequence[int] | np.ndarray) -> list[dict[str, str]]:
        return [self.row(int(r)) for r in rows]

    def close(self) -> None:
        self._map.close()
