"""The KV pool: where the keys and values of running rows live, grouped in length regions.

- `KVPool`: up to `rows` rows of up to `capacity` positions, allocated in chunks of rows as they
  are used and dropped when unused, so memory follows the rows in use.
- `Region`: one pool and the requests on its rows 0..B-1, in row order; a request that ends
  leaves a hole that the region's last rows move into (`remove`), so the running rows stay compact.
- `Regions`: a region per length class (prompt + token budget), made when first needed, so a
  decode step reads each region's keys only up to its own longest row (docs/profile.md#the-engine).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import torch

from pipeline.engine.base import Request
from pipeline.engine.qwen3 import Shape

# The length classes of the regions (positions a request can reach), capped by the model's context.
REGION_CAPACITIES = (128, 192, 256, 384, 512, 768)


class KVPool:
    """Keys and values of up to `rows` sequences of up to `capacity` positions each; a row's filled
    positions are 0..length-1. Rows live in chunks of CHUNK rows, each one buffer (2 x layers,
    CHUNK, kv_heads, capacity, head_dim) made when a row of it is first used and dropped when its
    rows have been unused for a chunk (`release`), so memory follows the rows in use, not the
    most ever used. A decode step attends chunk by chunk, each up to its own longest row.

    A decode step reads every row of a chunk up to the chunk's longest row, the rest masked; a
    masked position must still hold a finite number (0 x NaN is NaN), so each row's positions are
    zeroed once, up to what any step has read (`clean`), before they are first read."""

    CHUNK = 32

    def __init__(self, shape: Shape, rows: int, capacity: int, dtype: torch.dtype, device: torch.device):
        self.shape, self.rows, self.capacity, self.dtype, self.device = shape, rows, capacity, dtype, device
        self.chunks: list[torch.Tensor | None] = [None] * -(-rows // self.CHUNK)
        self.clean = [0] * rows  # positions 0..clean-1 of each row hold finite numbers

    def _new_chunk(self) -> torch.Tensor:
        s = self.shape
        return torch.empty((2 * s.layers, self.CHUNK, s.kv_heads, self.capacity, s.head_dim),
                           dtype=self.dtype, device=self.device)

    def chunk(self, index: int) -> torch.Tensor:
        if self.chunks[index] is None:
            self.chunks[index] = self._new_chunk()
        return self.chunks[index]

    def locate(self, row: int) -> tuple[torch.Tensor, int]:
        """The chunk holding `row` and the row's place in it."""
        return self.chunk(row // self.CHUNK), row % self.CHUNK

    def release(self, used: int) -> None:
        """Drop the chunks above the one after the last of the `used` rows (one spare stays, so
        a region hovering at a chunk's edge does not make and drop it every step)."""
        for index in range(-(-used // self.CHUNK) + 1, len(self.chunks)):
            if self.chunks[index] is not None:
                self.chunks[index] = None
                for row in range(index * self.CHUNK, min((index + 1) * self.CHUNK, self.rows)):
                    self.clean[row] = 0

    def _written(self, row: int, end: int) -> None:
        self.clean[row] = max(self.clean[row], end)

    def write(self, row: int, start: int, parts: Sequence[torch.Tensor]) -> int:
        """Copy cached keys and values `parts` into `row` from `start`; returns the end position."""
        buffer, local = self.locate(row)
        for part in parts:
            end = start + part.shape[2]
            buffer[:, local, :, start:end] = part
            start = end
        self._written(row, start)
        return start

    def read(self, row: int, start: int, end: int) -> torch.Tensor:
        buffer, local = self.locate(row)
        return buffer[:, local, :, start:end]

    def move(self, source: int, target: int, length: int) -> None:
        (into, i), (out_of, j) = self.locate(target), self.locate(source)
        into[:, i, :, :length] = out_of[:, j, :, :length]
        self._written(target, length)

    def make_clean(self, rows: Sequence[int], width: int) -> None:
        """Zero what `rows` have never held below `width`."""
        for row in rows:
            if self.clean[row] < width:
                buffer, local = self.locate(row)
                buffer[:, local, :, self.clean[row]:width] = 0
                self.clean[row] = width

    def spans(self, first: int, count: int) -> list[tuple[torch.Tensor, int, int, int]]:
        """Rows first..first+count-1 by chunk: (chunk, first local row, rows, offset into the range)."""
        out, row = [], first
        while row < first + count:
            buffer, local = self.locate(row)
            n = min(self.CHUNK - local, first + count - row)
            out.append((buffer, local, n, row - first))
            row += n
        return out


@dataclass
class Region:
    """Rows whose request needs at most `pool.capacity` positions (prompt + token budget): a decode
    step attends over a region's rows up to its longest row only, so short rows never pay for the
    longest context in flight. `requests[i]` runs on row i of the pool."""

    pool: KVPool
    requests: list[Request] = field(default_factory=list)

    def add(self, request: Request) -> int:
        """Put `request` on the next free row; returns the row."""
        self.requests.append(request)
        return len(self.requests) - 1

    def remove(self, gone: Iterable[int]) -> None:
        """Free rows `gone`: the last running rows move into the holes (their keys and values with
        them), so rows 0..B-1 stay the running ones; chunks left unused are dropped."""
        gone = set(gone)
        size = len(self.requests) - len(gone)
        holes = sorted(i for i in gone if i < size)
        movers = [i for i in range(size, len(self.requests)) if i not in gone]
        order = list(range(size))
        for hole, mover in zip(holes, movers):
            self.pool.move(mover, hole, self.requests[mover].filled)
            order[hole] = mover
        self.requests = [self.requests[i] for i in order]
        self.pool.release(len(self.requests))


class Regions:
    """The regions of one engine, by capacity (REGION_CAPACITIES up to the model's `capacity`)."""

    def __init__(self, shape: Shape, rows: int, capacity: int, device: torch.device):
        self.shape, self.rows, self.device = shape, rows, device
        self.classes = sorted({c for c in REGION_CAPACITIES if c < capacity} | {capacity})
        self.by_capacity: dict[int, Region] = {}

    def place(self, positions: int, dtype: torch.dtype) -> Region:
        """The region of a request that can reach `positions` (its pool in `dtype` when new)."""
        capacity = next(c for c in self.classes if c >= positions)
        region = self.by_capacity.get(capacity)
        if region is None:
            region = self.by_capacity[capacity] = Region(KVPool(self.shape, self.rows, capacity, dtype, self.device))
        return region

    def active(self) -> list[Region]:
        """The regions with running rows, shortest first (the decode step's row order)."""
        return [self.by_capacity[c] for c in sorted(self.by_capacity) if self.by_capacity[c].requests]

    @property
    def running(self) -> int:
        return sum(len(r.requests) for r in self.by_capacity.values())
