"""Which waiting work runs next, decided apart from running it.

`pick` is the one step the engine's admission and teacher forcing share (in the manner of
nano-vllm's and SGLang's schedulers, whose `schedule` chooses a batch and leaves the forward pass
to the model runner): it walks waiting items in their order, looks each one's prompt up in the
prefix cache, and takes items while a budget of tokens to compute lasts (at least one). An item
whose uncached start (MIN_SHARED_PREFIX tokens) another item taken in the same round is about to
compute is deferred: the next round finds that start in the cache (the 4 runs of a question, the
5 candidates of an Answerer). It moves nothing: the caller takes the picked and deferred items,
the first `consumed` of its order, off its queue.

`Waiting` is the engine's queue (a heap by priority, then submission order) and its admission
policy: free rows, the share of rows that must be free, how far a round looks.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Generic, TypeVar

import torch

from pipeline.engine.base import EngineConfig, Request
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.policy.batching import MIN_SHARED_PREFIX

# An admission round looks at most this many waiting requests per free row.
SCAN_FACTOR = 4

T = TypeVar("T")
_END = object()


@dataclass
class Pick(Generic[T]):
    item: T
    cached: int  # leading prompt tokens served from the prefix cache
    parts: list[torch.Tensor]  # their slots (PrefixCache.gather)


@dataclass
class Picked(Generic[T]):
    picked: list[Pick[T]]
    deferred: list[T]  # in their order

    @property
    def consumed(self) -> int:
        """How many leading items of the order were picked or deferred (the rest wait as they were)."""
        return len(self.picked) + len(self.deferred)


def pick(order: Iterable[T], prompt: Callable[[T], Sequence[int]], cost: Callable[[T, int], int],
         cache: PrefixCache, budget: int, most: int | None = None, scan: int | None = None) -> Picked[T]:
    """Items of `order` to run now, in order, while `budget` tokens to compute last (the first
    always): `cost(item, cached)` tokens each, `cached` being the length of its `prompt`'s cached
    start (the last prompt token is always computed). At most `most` picked and `scan` looked at.
    Looking an item up marks its cached prefix used (the cache's recency clock), as running it would."""
    picked: list[Pick[T]] = []
    deferred: list[T] = []
    starts: set[tuple[int, ...]] = set()  # the uncached starts this round computes
    scanned = 0
    items = iter(order)
    while (most is None or len(picked) < most) and (scan is None or scanned < scan):
        item = next(items, _END)
        if item is _END:
            break
        scanned += 1
        ids = prompt(item)
        cached, parts = cache.match(ids, limit=len(ids) - 1)
        new = cost(item, cached)
        head = tuple(ids[cached:cached + MIN_SHARED_PREFIX])
        if cache.budget and len(head) == MIN_SHARED_PREFIX and head in starts:
            deferred.append(item)  # the next round finds this start cached
            continue
        if picked and new > budget:
            break
        budget -= new
        starts.add(head)
        picked.append(Pick(item, cached, parts))
    return Picked(picked, deferred)


def heap_order(heap: list) -> Iterator:
    """The entries of `heap` in the order heappop would give them (entries compare unequal),
    without changing it: a frontier of the heap's nodes, so k entries cost O(k log k)."""
    if not heap:
        return
    frontier = [(heap[0], 0)]
    while frontier:
        entry, index = heapq.heappop(frontier)
        yield entry
        for child in (2 * index + 1, 2 * index + 2):
            if child < len(heap):
                heapq.heappush(frontier, (heap[child], child))


class Waiting:
    """Requests not yet admitted, by priority, then submission order (a rollout gives each team's
    requests the team's place, so earlier teams run to their end first)."""

    def __init__(self, config: EngineConfig, cache: PrefixCache):
        self.config, self.cache = config, cache
        self.heap: list[tuple[tuple, int, Request]] = []  # (priority, submission number, request)
        self.submitted = 0

    def __len__(self) -> int:
        return len(self.heap)

    def push(self, request: Request, priority: tuple) -> None:
        heapq.heappush(self.heap, (tuple(priority), self.submitted, request))
        self.submitted += 1

    def admit(self, running: int) -> list[Pick[Request]]:
        """The requests to prefill this step, taken off the queue: into free rows, in order, while
        the step's prefill budget lasts (at least one), and only once `admit_free_share` of the
        rows are free or nothing runs (fewer, larger prefill passes)."""
        config = self.config
        free = config.max_rows - running
        if not self.heap or free == 0:
            return []
        if running and free < config.admit_free_share * config.max_rows:
            return []
        chosen = pick(heap_order(self.heap), lambda entry: entry[2].prompt,
                      lambda entry, cached: len(entry[2].prompt) - cached, self.cache,
                      config.prefill_tokens, most=free, scan=SCAN_FACTOR * free)
        for _ in range(chosen.consumed):
            heapq.heappop(self.heap)
        for entry in chosen.deferred:
            heapq.heappush(self.heap, entry)
        return [Pick(p.item[2], p.cached, p.parts) for p in chosen.picked]
