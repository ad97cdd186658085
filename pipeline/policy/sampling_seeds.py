"""Which random numbers a seeded sample uses, the same for every backend.

A seeded `generate` call gives each of its entries (prompt i, sample j; entry k = i * n + j)
its own seed, and an entry's tokens depend on that seed and the token position only, never
on what else is in the batch (SGLang's seeded sampler, the in-process backend's
`keyed_uniforms`):

- with `SamplingParams.row_seeds`: entry (i, j) has entry_seed(row_seeds[i], j);
- else with `SamplingParams.seed`: entry k has entry_seed(seed, k);
- else the call is unseeded.

Row seeds let a caller tie a sample to what it is rather than where it sits in a batch: the
workflows key every request by (rollout seed, trajectory, call, turn), so two systems
evaluated with the same seed draw the same random numbers for the same request (common
random numbers): in their paired differences the noise they share cancels, though where
their policies differ their samples still do.
"""

from __future__ import annotations

import hashlib

import numpy as np

from pipeline.errors import InputError
from pipeline.policy.base import SamplingParams

_SEED_STRIDE = 1_000_033
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MIX1 = np.uint64(0xBF58476D1CE4E5B9)
_MIX2 = np.uint64(0x94D049BB133111EB)


def entry_seed(seed: int, k: int) -> int:
    """Seed of the k-th sample entry of a seeded call (k = prompt * n + sample)."""
    return (int(seed) + k * _SEED_STRIDE) % 2**31


def key_seed(*parts: object) -> int:
    """A seed in [0, 2**31) from any parts (stable across processes and machines)."""
    digest = hashlib.blake2b("/".join(map(str, parts)).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % 2**31


def sample_seeds(params: SamplingParams, n_prompts: int, n: int) -> list[int] | None:
    """The seed of every entry of a call (prompt-major), or None for an unseeded call."""
    if params.row_seeds is not None:
        if len(params.row_seeds) != n_prompts:
            raise InputError(f"row_seeds: expected one per prompt ({n_prompts}), got {len(params.row_seeds)}")
        return [entry_seed(s, j) for s in params.row_seeds for j in range(n)]
    if params.seed is None:
        return None
    return [entry_seed(params.seed, k) for k in range(n_prompts * n)]


def keyed_uniforms(seeds: np.ndarray, position: int) -> np.ndarray:
    """One uniform number per seed for token `position` (splitmix64 of (seed, position)), a
    multiple of 2**-24 in [0, 1 - 2**-24], so exact in float32 and never 1."""
    with np.errstate(over="ignore"):
        z = seeds.astype(np.uint64) * np.uint64(0x100000001B3) + np.uint64(position + 1) * _GOLDEN
        z = (z ^ (z >> np.uint64(30))) * _MIX1
        z = (z ^ (z >> np.uint64(27))) * _MIX2
        z = z ^ (z >> np.uint64(31))
    return (z >> np.uint64(40)).astype(np.float32) * np.float32(2.0**-24)
