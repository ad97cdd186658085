"""A radix tree of token-id prefixes and their keys and values, in the manner of SGLang's RadixAttention.

Prompts of a rollout repeat each other's starts: a workflow's next turn is its last context plus
what came back, the runs of one question share their first prompts, every prompt of a role
starts with the role's instructions, an Answerer's candidates share one prompt. Each edge of the
tree holds a run of token ids and the slots of their keys and values in one preallocated slab,
(2 x layers, kv_heads, budget, head_dim), computed once; a new request copies its longest cached
prefix into its row and prefills only the rest. Copying a position costs a few kilobytes of
memory traffic; computing it costs a forward pass. The slab is one allocation of fixed size, so
the cache never scatters small long-lived tensors through the heap (which kept a stage's memory
from being returned as it ran).

Eviction is least-recently-used over leaves, by a step clock (never wall time), so what is cached,
and hence what a run computes, is the same on every run. Cached values belong to one version of
the weights: the owner clears the tree when they change.

`state_dict` / `load_state_dict` carry the whole cache (tree, recency, free slots and the cached
keys and values) across a training checkpoint, so a resumed run looks up and evicts exactly what
the uninterrupted one does (pipeline.rl.run_state).
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Sequence

import torch

# (start, end) -> keys and values of those positions, (2 x layers, kv_heads, end - start, head_dim)
KVSource = Callable[[int, int], torch.Tensor]


def _shared(edge: tuple[int, ...], ids: tuple[int, ...], start: int, limit: int) -> int:
    """How many leading tokens of `edge` equal ids[start:limit] (slice comparisons run in C)."""
    n = min(len(edge), limit - start)
    if edge[:n] == ids[start:start + n]:
        return n
    low, high = 0, n  # edge[:low] matches, edge[:high] does not
    while high - low > 1:
        middle = (low + high) // 2
        if edge[low:middle] == ids[start + low:start + middle]:
            low = middle
        else:
            high = middle
    return low


class _Node:
    __slots__ = ("tokens", "slots", "children", "parent", "used")

    def __init__(self, tokens: tuple[int, ...], slots: torch.Tensor | None, parent: _Node | None, used: int):
        self.tokens, self.slots, self.parent, self.used = tokens, slots, parent, used
        self.children: dict[int, _Node] = {}


class PrefixCache:
    """Longest-prefix lookup and insertion of token ids with their keys and values, at most
    `budget_tokens` positions held (0: caching off)."""

    def __init__(self, budget_tokens: int):
        if budget_tokens < 0:
            raise ValueError(f"budget_tokens: expected >= 0, got {budget_tokens}")
        self.budget = budget_tokens
        self.slab: torch.Tensor | None = None  # made at the first insertion, in its values' shape
        self.clear()
        self.clock = 0

    def clear(self) -> None:
        self.root = _Node((), None, None, 0)
        self.free = list(range(self.budget - 1, -1, -1))  # free slots, taken from the end

    @property
    def tokens(self) -> int:
        """Positions held."""
        return self.budget - len(self.free)

    def tick(self) -> None:
        """One scheduler step has passed (the LRU clock)."""
        self.clock += 1

    def match(self, ids: Sequence[int], limit: int | None = None) -> tuple[int, list[torch.Tensor]]:
        """(n, parts): the first n <= limit ids are cached; `parts` are their slots in order (`gather`
        gives their keys and values)."""
        limit = len(ids) if limit is None else min(limit, len(ids))
        ids = tuple(ids)
        node, n, parts = self.root, 0, []
        while n < limit:
            child = node.children.get(ids[n])
            if child is None:
                break
            edge = child.tokens
            take = _shared(edge, ids, n, limit)
            child.used = self.clock
            parts.append(child.slots if take == len(edge) else child.slots[:take])
            n += take
            if take < len(edge):
                break
            node = child
        return n, parts

    def gather(self, parts: Sequence[torch.Tensor]) -> torch.Tensor:
        """Keys and values of matched `parts`, (2 x layers, kv_heads, positions, head_dim)."""
        return self.slab.index_select(2, torch.cat(list(parts)) if len(parts) > 1 else parts[0])

    def insert(self, ids: Sequence[int], source: KVSource) -> None:
        """Cache `ids`; keys and values of the positions not yet cached come from `source`."""
        if self.budget == 0 or not ids:
            return
        node, n = self.root, 0
        ids = tuple(ids)
        while n < len(ids):
            child = node.children.get(ids[n])
            if child is None:
                self._add_leaf(node, ids[n:], n, source)
                return
            edge = child.tokens
            take = _shared(edge, ids, n, len(ids))
            child.used = self.clock
            if take < len(edge):
                if n + take == len(ids):
                    return  # the ids end inside this edge: all cached already
                self._split(child, take)
            node, n = child, n + take

    def _add_leaf(self, parent: _Node, tokens: tuple[int, ...], start: int, source: KVSource) -> None:
        size = min(len(tokens), self.budget)  # a run longer than the whole cache keeps its start
        if len(self.free) < size:
            self._evict(size, keep=parent)
        if len(self.free) < size:
            return  # everything left is on the path being extended
        values = source(start, start + size)
        if self.slab is None:
            shape = list(values.shape)
            shape[2] = self.budget
            self.slab = values.new_empty(shape)
        slots = torch.tensor(self.free[-size:][::-1], dtype=torch.long, device=self.slab.device)
        del self.free[-size:]
        self.slab.index_copy_(2, slots, values)
        parent.children[tokens[0]] = _Node(tokens[:size], slots, parent, self.clock)

    def _split(self, node: _Node, at: int) -> None:
        """Cut `node`'s edge after `at` tokens: node keeps the head, a new child the tail."""
        tail = _Node(node.tokens[at:], node.slots[at:], node, node.used)
        tail.children = node.children
        for grandchild in tail.children.values():
            grandchild.parent = tail
        node.tokens, node.slots = node.tokens[:at], node.slots[:at]
        node.children = {tail.tokens[0]: tail}

    def _evict(self, wanted: int, keep: _Node) -> None:
        """Free least-recently-used leaves (ties: tree-walk order, so eviction is deterministic) until
        `wanted` slots are free and a tenth of the budget besides, never `keep` or its ancestors.

        A heap on (last used, order), as SGLang's RadixCache.evict keeps its leaves: `order` numbers
        the leaves in the order of one walk of the tree, then each parent that loses its last child
        after everything queued before it, so among equal last uses it goes last (the same order as
        a queue sorted stably by last use; tests/test_engine_scheduler.py checks it against one)."""
        protected = set()
        node = keep
        while node is not None:
            protected.add(id(node))
            node = node.parent
        target = min(self.budget, wanted + self.budget // 10)
        heap = [(leaf.used, order, leaf) for order, leaf in enumerate(self._leaves(protected))]
        heapq.heapify(heap)
        order = len(heap)
        while len(self.free) < target and heap:
            _, _, leaf = heapq.heappop(heap)
            parent = leaf.parent
            del parent.children[leaf.tokens[0]]
            self.free.extend(leaf.slots.tolist())
            if parent is not self.root and not parent.children and id(parent) not in protected:
                heapq.heappush(heap, (parent.used, order, parent))  # the parent became a leaf
                order += 1

    def state_dict(self) -> dict:
        """Everything that decides later lookups: the tree in preorder (children in insertion
        order), each node's tokens, slots and last use, the free slots in order, the clock, and
        the keys and values of the slots in use. Tensors and plain numbers only."""
        nodes, parents = [], []
        stack = [(child, 0) for child in reversed(list(self.root.children.values()))]
        while stack:
            node, parent = stack.pop()
            parents.append(parent)
            nodes.append(node)
            here = len(nodes)  # the root is 0
            stack.extend((child, here) for child in reversed(list(node.children.values())))
        slots = torch.cat([n.slots for n in nodes]) if nodes else torch.zeros(0, dtype=torch.long)
        return {
            "budget": self.budget, "clock": self.clock,
            "free": torch.tensor(self.free, dtype=torch.long),
            "parents": torch.tensor(parents, dtype=torch.long),
            "used": torch.tensor([n.used for n in nodes], dtype=torch.long),
            "lengths": torch.tensor([len(n.tokens) for n in nodes], dtype=torch.long),
            "tokens": torch.tensor([t for n in nodes for t in n.tokens], dtype=torch.long),
            "slots": slots.cpu(),
            "slab_shape": list(self.slab.shape) if self.slab is not None else [],
            "values": self.slab.index_select(2, slots).cpu() if self.slab is not None and nodes else torch.zeros(0),
        }

    def load_state_dict(self, state: dict, device: torch.device | str = "cpu") -> None:
        """The cache as `state_dict` saw it (a cache of the same budget)."""
        if int(state["budget"]) != self.budget:
            raise ValueError(f"prefix cache: a state of {state['budget']} tokens for a cache of {self.budget}")
        self.clear()
        self.clock = int(state["clock"])
        self.free = state["free"].tolist()
        shape = [int(x) for x in state["slab_shape"]]
        if shape:
            values = state["values"]
            if self.slab is None or list(self.slab.shape) != shape or self.slab.dtype != values.dtype:
                self.slab = torch.empty(shape, dtype=values.dtype, device=device)
            if values.numel():
                self.slab.index_copy_(2, state["slots"].to(self.slab.device), values.to(self.slab.device))
        slots = state["slots"].to(self.slab.device) if self.slab is not None else state["slots"]
        made = [self.root]
        tokens, start = state["tokens"].tolist(), 0
        for parent, used, length in zip(state["parents"].tolist(), state["used"].tolist(), state["lengths"].tolist()):
            owner = made[parent]
            node = _Node(tuple(tokens[start:start + length]), slots[start:start + length], owner, used)
            owner.children[node.tokens[0]] = node
            made.append(node)
            start += length

    def _leaves(self, protected: set[int]) -> list[_Node]:
        """The unprotected leaves, in the order of a depth-first walk (the last child first)."""
        leaves = []
        stack = [self.root]
        while stack:
            node = stack.pop()
            if node is not self.root and not node.children and id(node) not in protected:
                leaves.append(node)
            stack.extend(node.children.values())
        return leaves
