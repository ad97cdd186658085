"""The one interface every model backend implements (transformers in-process, SGLang over HTTP).

Agents only ever see token ids: they build prompt ids with `encode_prompt`, get back the
generated ids with their sampling log-probs, and append observation ids from `encode`.
Training re-uses exactly these ids; nothing is re-tokenised from decoded text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from pipeline.errors import InputError


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


def validate_sampling(params: SamplingParams, n: int, prompts: int | None = None,
                      max_context: int | None = None) -> None:
    """Refuse a `generate` call no backend can serve: `prompts` (their count) checks the row
    budgets, `max_context` (the model's positions, where the backend knows them) the token budget."""
    if n < 1:
        raise InputError(f"n: expected >= 1 samples per prompt, got {n}")
    if params.temperature < 0:
        raise InputError(f"temperature: expected >= 0, got {params.temperature}")
    if not 0 < params.top_p <= 1:
        raise InputError(f"top_p: expected in (0, 1], got {params.top_p}")
    if params.max_new_tokens < 1:
        raise InputError(f"max_new_tokens: expected >= 1, got {params.max_new_tokens}")
    if max_context is not None and params.max_new_tokens >= max_context:
        raise InputError(f"max_new_tokens: expected < the model's context {max_context}, got {params.max_new_tokens}")
    budgets = params.row_max_new_tokens
    if prompts is not None and budgets is not None and len(budgets) != prompts:
        raise InputError(f"row_max_new_tokens: expected one per prompt ({prompts}), got {len(budgets)}")


def validate_scoring(prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
                     temperature: float = 1.0, max_context: int | None = None) -> None:
    """Refuse a `score` call no backend can serve: one response per prompt, a temperature > 0, no
    empty prompt (its first response token would have nothing to be predicted from), each
    response shorter than `max_context` where the backend knows it."""
    if len(prompts) != len(responses):
        raise InputError(f"responses: expected one per prompt ({len(prompts)}), got {len(responses)}")
    if temperature <= 0:
        raise InputError(f"temperature: expected > 0 for scoring, got {temperature}")
    for i, (prompt, response) in enumerate(zip(prompts, responses)):
        if max_context is not None and len(response) >= max_context:
            raise InputError(f"responses[{i}]: expected fewer than {max_context} tokens, got {len(response)}")
        if len(prompt) == 0:
            raise InputError(f"prompts[{i}]: expected at least one token, got an empty prompt")


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
