"""The one interface every model backend implements (transformers in-process, SGLang over HTTP).

Agents only ever see token ids: they build prompt ids with `encode_prompt`, get back the
generated ids with their sampling log-probs, and append observation ids from `encode`.
Training re-uses exactly these ids; nothing is re-tokenised from decoded text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class SamplingParams:
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 128
    # Generation stops once the decoded text of the generated tokens contains one of these;
    # the token that completes the stop string is kept.
    stop: tuple[str, ...] = ()
    seed: int | None = None
    # One seed per prompt; when given it replaces `seed` (pipeline.policy.sampling_seeds).
    row_seeds: tuple[int, ...] | None = None
    # In-process backend only (pipeline.policy.batching): prefill prompts that start alike as one
    # shared prefix plus their suffixes. The same distribution, faster on CPU; the floating-point
    # sums differ, so outputs are not byte-identical to prefilling each prompt whole.
    shared_prefixes: bool = False
    # One token budget per prompt (each at most max_new_tokens): the in-process backend stops a
    # row at its own budget; a backend that ignores it decodes on and the caller cuts the row.
    row_max_new_tokens: tuple[int, ...] | None = None


@dataclass
class Generation:
    token_ids: list[int]
    logprobs: list[float]  # log pi_old(token | context), one per generated token
    text: str  # decode(token_ids)
    finish_reason: str  # "stop" (hit a stop string or EOS) | "length"


@runtime_checkable
class PolicyBackend(Protocol):
    def encode_prompt(self, text: str) -> list[int]:
        """Token ids of a full role prompt (applies the chat template when the model has one)."""

    def encode(self, text: str) -> list[int]:
        """Token ids of a piece of text appended inside a response (observations); no specials."""

    def decode(self, ids: Sequence[int]) -> str: ...

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        """For each prompt, `n` independent samples. All prompts go through as one batch."""

    def score(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        """Teacher-forced log p(response_t | prompt, response_<t), one float per response token."""
