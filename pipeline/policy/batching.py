"""Prompts of one generate call that start alike, prefilled as one shared prefix plus their suffixes.

Every prompt of a role starts with the role's instructions, and the runs of one question share
its text and history: about 30% of an evaluation tick's prefill tokens repeat a prefix of another
prompt of the same call (docs/profile.md#grouped-generation). Prompts are sorted, chained while
neighbours share at least MIN_SHARED_PREFIX tokens, and each chain is prefilled as its common
prefix once plus each prompt's own suffix.
"""

from __future__ import annotations

from collections.abc import Sequence

# A shorter common start is not worth a forward pass of its own, nor a request's wait for another
# to compute it (the engine's pick step, pipeline.engine.scheduler).
MIN_SHARED_PREFIX = 16


def _common_length(a: Sequence[int], b: Sequence[int]) -> int:
    n = 0
    for x, y in zip(a, b):
        if x != y:
            break
        n += 1
    return n


def shared_prefix_groups(
    prompts: Sequence[Sequence[int]], min_shared: int = MIN_SHARED_PREFIX
) -> list[tuple[int, list[int]]]:
    """(shared, indices) for every prompt of `prompts`, each exactly once: the prompts `indices`
    all start with the same `shared` tokens, and each is longer than that (its suffix is never
    empty). Prompts that share fewer than `min_shared` tokens with their sorted neighbours come
    last, as one group with shared = 0."""
    order = sorted(range(len(prompts)), key=lambda i: tuple(prompts[i]))
    chains: list[list[int]] = []
    shares: list[int] = []
    for i in order:
        common = _common_length(prompts[chains[-1][-1]], prompts[i]) if chains else 0
        if chains and common >= min_shared:
            chains[-1].append(i)
            shares[-1] = min(shares[-1], common)
        else:
            chains.append([i])
            shares.append(len(prompts[i]))
    groups, alone = [], []
    for chain, common in zip(chains, shares):
        common = min(common, min(len(prompts[i]) for i in chain) - 1)
        if len(chain) > 1 and common >= min_shared:
            groups.append((common, chain))
        else:
            alone.extend(chain)
    if alone:
        groups.append((0, sorted(alone)))
    return groups
