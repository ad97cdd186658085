"""Where each token's keys and values live, and what it attends to: the `Attention` callbacks of
pipeline.engine.qwen3.forward_hidden.

- `PoolPrefill`: new prompt tokens of admitted rows, written into their rows of the KV pool after
  whatever cached prefix was copied there, each attending causally to its row.
- `PoolDecode`: one token per running row (rows 0..B-1 of the pool, compact), written at its
  position; one attention call per layer and pool chunk over its rows' filled positions.
  `RegionsDecode`: one decode step over several pools (the engine's length regions).
- `Segments`: packed sequences with no pool (teacher forcing, the trainer's packed pass): each
  segment attends to an optional cached prefix and causally within itself, or by an explicit mask
  (a shared prompt with several responses after it).

The pool itself is pipeline.engine.kv_pool. Each callback is built by its caller for one forward
pass and passed to it explicitly: what a token attends to is never global state.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from pipeline.engine.kv_pool import KVPool
from pipeline.engine.qwen3 import Shape


def _expand_heads(x: torch.Tensor, groups: int) -> torch.Tensor:
    """(..., kv_heads, n, d) -> (..., heads, n, d) for grouped-query attention."""
    return x if groups == 1 else x.repeat_interleave(groups, dim=-3)


def _offset_causal(new: int, start: int, device: torch.device) -> torch.Tensor:
    """(new, start + new) mask: new token i sees positions 0..start+i."""
    keys = torch.arange(start + new, device=device)
    return keys[None, :] <= (start + torch.arange(new, device=device))[:, None]


class PoolPrefill:
    """New prompt tokens of admitted rows, packed in admission order: each row's keys and values
    are written after its cached prefix, and the admitted rows of each pool chunk (appended at the
    pool's end, so consecutive) attend in one call, their queries padded to the longest new part
    and masked causally from each row's own start."""

    def __init__(self, rows: list[tuple[KVPool, int]], starts: list[int], ends: list[int]):
        device = rows[0][0].device
        offsets = np.cumsum([0] + [e - s for s, e in zip(starts, ends)])
        by_chunk: dict[tuple[int, int], list[int]] = {}
        for i, (pool, row) in enumerate(rows):
            by_chunk.setdefault((id(pool), row // KVPool.CHUNK), []).append(i)
        self.total = int(offsets[-1])
        self.groups = []
        for members in by_chunk.values():
            pool, row0 = rows[members[0]]
            if [rows[i][1] for i in members] != list(range(row0, row0 + len(members))):
                raise RuntimeError("PoolPrefill: a pool's admitted rows must be consecutive")
            buffer, first = pool.locate(row0)
            new = max(ends[i] - starts[i] for i in members)
            width = max(ends[i] for i in members)
            tokens, cols, slots = [], [], []
            mask = torch.zeros((len(members), 1, new, width), dtype=torch.bool)
            for j, i in enumerate(members):
                n = ends[i] - starts[i]
                tokens.append(np.arange(offsets[i], offsets[i] + n))
                cols.append(np.arange(starts[i], ends[i]))
                slots.append(j * new + np.arange(n))
                mask[j, 0, :n, :ends[i]] = _offset_causal(n, starts[i], torch.device("cpu"))
                mask[j, 0, n:, 0] = True  # padded queries see one key (their output is dropped), never none
                pool._written(rows[i][1], ends[i])
            pool.make_clean([rows[i][1] for i in members], width)  # the masked tail of shorter rows
            token_index = torch.from_numpy(np.concatenate(tokens)).to(device)
            row_index = torch.tensor([first + j for j, t in enumerate(tokens) for _ in t], device=device)
            self.groups.append((pool.shape, buffer, first, len(members), new, width, token_index, row_index,
                                torch.from_numpy(np.concatenate(cols)).to(device),
                                torch.from_numpy(np.concatenate(slots)).to(device), mask.to(device)))

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        out = q.new_empty((self.total, q.shape[1] * q.shape[2]))
        for s, buffer, first, count, new, width, tokens, rows, cols, slots, mask in self.groups:
            keys, values = buffer[2 * layer], buffer[2 * layer + 1]
            keys[rows, :, cols] = k[tokens]
            values[rows, :, cols] = v[tokens]
            padded = q.new_zeros((count * new, s.heads, s.head_dim))
            padded[slots] = q[tokens]
            padded = padded.view(count, new, s.heads, s.head_dim).transpose(1, 2)
            groups = s.heads // s.kv_heads
            attended = F.scaled_dot_product_attention(
                padded, _expand_heads(keys[first:first + count, :, :width], groups),
                _expand_heads(values[first:first + count, :, :width], groups), attn_mask=mask)
            out[tokens] = attended.transpose(1, 2).reshape(count * new, s.heads * s.head_dim)[slots]
        return out


class PoolDecode:
    """One new token for each of the pool's rows 0..B-1 at `positions` (B,): per chunk, written at
    its position, then one attention call over the chunk's rows up to its longest row."""

    def __init__(self, pool: KVPool, positions: torch.Tensor):
        self.shape = pool.shape
        self.batch = positions.shape[0]
        self.parts = []
        device = positions.device
        for buffer, local, n, offset in pool.spans(0, self.batch):
            chunk_positions = positions[offset:offset + n]
            width = int(chunk_positions.max()) + 1
            pool.make_clean(range(offset, offset + n), width)
            index = torch.arange(local, local + n, device=device)
            mask = (torch.arange(width, device=device)[None, :] <= chunk_positions[:, None])[:, None, None, :]
            self.parts.append((buffer, local, n, offset, width, index, chunk_positions, mask))

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = self.shape
        out = []
        for buffer, local, n, offset, width, index, positions, mask in self.parts:
            keys, values = buffer[2 * layer], buffer[2 * layer + 1]
            keys[index, :, positions] = k[offset:offset + n]
            values[index, :, positions] = v[offset:offset + n]
            # grouped-query heads ride in the query-length axis: (n, kv_heads, groups, d), no copy of keys
            qg = q[offset:offset + n].view(n, s.kv_heads, s.heads // s.kv_heads, s.head_dim)
            attended = F.scaled_dot_product_attention(qg, keys[local:local + n, :, :width],
                                                      values[local:local + n, :, :width], attn_mask=mask)
            out.append(attended.reshape(n, s.heads * s.head_dim))
        return torch.cat(out) if len(out) > 1 else out[0]


class RegionsDecode:
    """One decode step over several pools (the engine's length regions): rows in pool order, each
    pool's part attended to its own rows and widths."""

    def __init__(self, parts: list[tuple[KVPool, torch.Tensor]]):
        self.decoders = [PoolDecode(pool, positions) for pool, positions in parts]
        self.sizes = [d.batch for d in self.decoders]

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        if len(self.decoders) == 1:
            return self.decoders[0](layer, q, k, v)
        pieces = zip(self.decoders, q.split(self.sizes), k.split(self.sizes), v.split(self.sizes))
        return torch.cat([decoder(layer, *qkv) for decoder, *qkv in pieces])


@dataclass
class Segment:
    """`length` packed tokens attending to `prefix` (cached keys and values, (2 x layers, kv_heads,
    m, head_dim) parts, inference only) and to each other causally, or by `mask` (length, m + length)."""

    length: int
    prefix: list[torch.Tensor] | None = None
    mask: torch.Tensor | None = None

    @property
    def cached(self) -> int:
        return sum(p.shape[2] for p in self.prefix) if self.prefix else 0


class Segments:
    """Attention over packed segments; with `keep`, every segment's full keys and values (prefix
    included) are kept, (2 x layers, kv_heads, m + length, head_dim), for the prefix cache."""

    def __init__(self, shape: Shape, segments: list[Segment], keep: bool = False):
        self.shape, self.segments, self.keep = shape, segments, keep
        self.prefix = [torch.cat(s.prefix, dim=2) if s.prefix else None for s in segments]
        self.kept: list[list[torch.Tensor]] = [[] for _ in segments]

    def full_kv(self, index: int) -> torch.Tensor:
        return torch.stack(self.kept[index]).flatten(0, 1)

    def __call__(self, layer: int, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        s = self.shape
        groups = s.heads // s.kv_heads
        out, offset = [], 0
        for i, segment in enumerate(self.segments):
            n = segment.length
            ki, vi = k[offset:offset + n].transpose(0, 1), v[offset:offset + n].transpose(0, 1)
            cached = self.prefix[i]
            if cached is not None:
                ki = torch.cat([cached[2 * layer], ki], dim=1)
                vi = torch.cat([cached[2 * layer + 1], vi], dim=1)
            if self.keep:
                self.kept[i].append(torch.stack([ki, vi]))
            qi = q[offset:offset + n].transpose(0, 1)[None]
            ke, ve = _expand_heads(ki, groups)[None], _expand_heads(vi, groups)[None]
            if segment.mask is not None:
                attended = F.scaled_dot_product_attention(qi, ke, ve, attn_mask=segment.mask)
            elif cached is None:
                attended = F.scaled_dot_product_attention(qi, ke, ve, is_causal=True)
            else:
                attended = F.scaled_dot_product_attention(
                    qi, ke, ve, attn_mask=_offset_causal(n, cached.shape[2], q.device))
            out.append(attended[0].transpose(0, 1).reshape(n, s.heads * s.head_dim))
            offset += n
        return torch.cat(out) if len(out) > 1 else out[0]
