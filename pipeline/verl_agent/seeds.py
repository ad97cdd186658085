"""Seeds of the verl path, and an in-process backend with the same seed semantics.

verl's server client takes one prompt per `generate`, so the agent loop sends every entry of
a tick (prompt i, sample j) as its own request, seeded with its entry's seed
(pipeline.policy.sampling_seeds), as SGLangBackend sends a seeded batch. A sample then
depends on its own seed only, never on what else was in flight. `PerEntrySeedBackend` gives
an in-process backend exactly these semantics, so `run_workflow` over it is the reference the
agent loop must reproduce.
"""

from __future__ import annotations

import dataclasses
import zlib
from collections.abc import Sequence

import numpy as np

from pipeline.policy.base import Generation, PolicyBackend, SamplingParams
from pipeline.policy.sampling_seeds import sample_seeds


def trajectory_seed(seed: int, step: int, question_id: str, k: int) -> int:
    """Rollout seed of trajectory k of one question at one training step."""
    parts = [int(seed), int(step), zlib.crc32(str(question_id).encode()), int(k)]
    return int(np.random.default_rng(parts).integers(2**31 - 1))


def entry_seeds(params: SamplingParams, n_prompts: int, n: int) -> list[int | None]:
    """Seed of each entry of one call (None for every entry of an unseeded call)."""
    seeds = sample_seeds(params, n_prompts, n)
    return [None] * (n_prompts * n) if seeds is None else list(seeds)


class PerEntrySeedBackend:
    """Wraps a backend: each (prompt, sample) is generated alone with its entry seed."""

    def __init__(self, backend: PolicyBackend) -> None:
        self.backend = backend

    def encode_prompt(self, text: str) -> list[int]:
        return self.backend.encode_prompt(text)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(text)

    def decode(self, ids: Sequence[int]) -> str:
        return self.backend.decode(ids)

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        seeds = entry_seeds(params, len(prompts), n)
        out: list[list[Generation]] = []
        for i, prompt in enumerate(prompts):
            row = []
            for j in range(n):
                one = dataclasses.replace(params, seed=seeds[i * n + j], row_seeds=None)
                row.append(self.backend.generate([prompt], one, n=1)[0][0])
            out.append(row)
        return out

    def score(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> list[list[float]]:
        return self.backend.score(prompts, responses)
