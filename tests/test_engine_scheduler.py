"""The engine's bookkeeping without a model: the pick step that admission and teacher forcing share
(pipeline.engine.scheduler), the heap it walks, the prefix cache's eviction order against the
sorted queue it replaced, and a region's compaction of its rows."""

from __future__ import annotations

import heapq
import random

import torch

from pipeline.engine.base import EngineConfig, Request
from pipeline.engine.kv_pool import KVPool, Region
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.engine.qwen3 import Shape
from pipeline.engine.scheduler import Waiting, heap_order, pick
from pipeline.policy.batching import MIN_SHARED_PREFIX


def kv(start: int, end: int) -> torch.Tensor:
    return torch.arange(start, end, dtype=torch.float32).view(1, 1, -1, 1)


def reference_evict(cache: PrefixCache, wanted: int, keep) -> None:
    """The eviction before the heap: leaves of one tree walk, sorted stably by last use, taken
    from the front; a parent that becomes a leaf goes in after every entry used no later."""
    protected = set()
    node = keep
    while node is not None:
        protected.add(id(node))
        node = node.parent
    target = min(cache.budget, wanted + cache.budget // 10)
    leaves = []
    stack = [cache.root]
    while stack:
        node = stack.pop()
        if node is not cache.root and not node.children and id(node) not in protected:
            leaves.append(node)
        stack.extend(node.children.values())
    leaves.sort(key=lambda leaf: leaf.used)
    queue = list(leaves)
    while len(cache.free) < target and queue:
        leaf = queue.pop(0)
        parent = leaf.parent
        del parent.children[leaf.tokens[0]]
        cache.free.extend(leaf.slots.tolist())
        if parent is not cache.root and not parent.children and id(parent) not in protected:
            position = 0
            while position < len(queue) and queue[position].used <= parent.used:
                position += 1
            queue.insert(position, parent)


def tree(cache: PrefixCache) -> list:
    out, stack = [], [(cache.root, ())]
    while stack:
        node, path = stack.pop()
        out.append((path, node.tokens, node.used, None if node.slots is None else node.slots.tolist()))
        stack.extend((child, path + (key,)) for key, child in node.children.items())
    return out


def test_eviction_order_is_the_sorted_queue_it_replaced():
    """Two caches under the same inserts, lookups and clock ticks, one evicting by the heap, one by
    the sorted queue: the same slots freed in the same order, the same tree after every call."""
    rng = random.Random(0)
    evictions = []
    for _ in range(40):
        budget = rng.randint(20, 80)
        ours, theirs = PrefixCache(budget), PrefixCache(budget)
        theirs._evict = lambda wanted, keep, cache=theirs: reference_evict(cache, wanted, keep)
        heap_evict = ours._evict
        ours._evict = lambda wanted, keep, evict=heap_evict: evictions.append(evict(wanted, keep))
        for _ in range(150):
            roll = rng.random()
            if roll < 0.6:
                ids = [rng.randrange(3) for _ in range(rng.randint(1, 14))]
                ours.insert(ids, kv)
                theirs.insert(ids, kv)
            elif roll < 0.85:
                probe = [rng.randrange(3) for _ in range(rng.randint(1, 10))]
                assert ours.match(probe)[0] == theirs.match(probe)[0]
            else:
                ours.tick()  # few ticks: many leaves share a last use
                theirs.tick()
            assert ours.free == theirs.free  # the same slots freed, in the same order
            assert tree(ours) == tree(theirs)
    assert len(evictions) > 500


def test_heap_order_is_the_pop_order_and_leaves_the_heap_alone():
    rng = random.Random(1)
    for n in (0, 1, 2, 7, 100):
        heap = [((rng.randrange(3),), i, f"r{i}") for i in range(n)]
        rng.shuffle(heap)
        heapq.heapify(heap)
        before = list(heap)
        walked = list(heap_order(heap))
        assert heap == before
        assert walked == [heapq.heappop(heap) for _ in range(n)]


def test_pick_defers_a_start_another_pick_computes_and_keeps_the_budget():
    cache = PrefixCache(budget_tokens=1000)
    shared = list(range(100, 100 + MIN_SHARED_PREFIX))
    prompts = [shared + [1, 2], shared + [3], [7] * 40, [8] * 10, [9] * 5]
    chosen = pick(range(len(prompts)), lambda i: prompts[i], lambda i, cached: len(prompts[i]) - cached, cache,
                  budget=60)
    assert [p.item for p in chosen.picked] == [0, 2]  # 18 + 40 tokens; 10 more would pass 60
    assert chosen.deferred == [1] and chosen.consumed == 3
    one = pick(range(len(prompts)), lambda i: prompts[i], lambda i, cached: 10**6, cache, budget=1)
    assert [p.item for p in one.picked] == [0]  # the first always, whatever it costs
    limited = pick(range(len(prompts)), lambda i: prompts[i], lambda i, cached: 1, cache, budget=100, scan=2)
    assert [p.item for p in limited.picked] == [0] and limited.deferred == [1]
    cache.insert(shared + [1, 2], kv)
    again = pick([1], lambda i: prompts[i], lambda i, cached: len(prompts[i]) - cached, cache, budget=60)
    assert again.picked[0].cached == MIN_SHARED_PREFIX  # the next round finds the start cached
    off = PrefixCache(budget_tokens=0)
    assert len(pick(range(2), lambda i: prompts[i], lambda i, c: 1, off, budget=60).picked) == 2  # no cache: no wait


def test_admission_takes_picked_and_deferred_off_the_queue():
    config = EngineConfig(max_rows=4, prefill_tokens=100, prefix_cache_tokens=1000, admit_free_share=0.5)
    waiting = Waiting(config, PrefixCache(config.prefix_cache_tokens))
    shared = list(range(100, 100 + MIN_SHARED_PREFIX))
    for key, (prompt, priority) in enumerate([(shared + [1], (1,)), (shared + [2], (1,)), ([5] * 30, (0,)),
                                              ([6] * 30, (2,)), ([4] * 30, (2,))]):
        waiting.push(Request(key, prompt, 4, 1.0, 1.0, (), None), priority)
    assert [p.item.key for p in waiting.admit(running=0)] == [2, 0, 3]  # by priority; 1 waits a round
    assert [entry[2].key for entry in sorted(waiting.heap)] == [1, 4]
    assert waiting.admit(running=3) == []  # a quarter of the rows free: less than admit_free_share
    assert [p.item.key for p in waiting.admit(running=2)] == [1, 4]


def test_a_region_moves_its_last_rows_into_the_holes():
    shape = Shape(hidden=8, layers=1, heads=1, kv_heads=1, head_dim=2, intermediate=8, vocab=10,
                  max_positions=16, eps=1e-6)
    region = Region(KVPool(shape, rows=6, capacity=16, dtype=torch.float32, device=torch.device("cpu")))
    for row in range(6):
        request = Request(row, [row] * (2 + row), 4, 1.0, 1.0, (), None, tokens=[9])
        assert region.add(request) == row
        region.pool.write(row, 0, [torch.full((2, 1, request.filled, 2), float(row))])
    region.remove([1, 4, 5])
    assert [r.key for r in region.requests] == [0, 3, 2]  # row 3 moved into hole 1
    for row, request in enumerate(region.requests):
        assert region.pool.read(row, 0, request.filled).eq(float(request.key)).all()
