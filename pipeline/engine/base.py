"""What the engine's parts share: its settings, its counters, and a request with its own state.

A request carries everything that is its own, as nano-vllm's `Sequence` does: what was asked
(prompt, budget, sampling, stop strings, seed) and how far it got (tokens and their log-probs,
why it ended). Where its keys and values live is its row's business (pipeline.engine.kv_pool);
what its row holds follows from its tokens, so no list beside it has to be kept in step.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field

from pipeline.errors import InputError


@dataclass(frozen=True)
class EngineConfig:
    max_rows: int = 256  # rows decoding at once
    prefill_tokens: int = 8192  # new prompt tokens prefilled per step (at least one request)
    prefix_cache_tokens: int = 65536  # positions the prefix cache holds (0: off)
    # admit only when at least this share of max_rows is free (or nothing runs): fewer, larger
    # prefill passes instead of one small pass per finished row
    admit_free_share: float = 0.125
    # linear layers, keys, values and attention in bfloat16 (for a CPU that computes it natively);
    # False: everything in the model's own dtype
    bf16: bool = False

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.prefill_tokens < 1 or self.prefix_cache_tokens < 0:
            raise InputError(f"engine: expected max_rows, prefill_tokens >= 1 and prefix_cache_tokens >= 0, got {self}")
        if not 0 <= self.admit_free_share <= 1:
            raise InputError(f"engine: admit_free_share must be in [0, 1], got {self.admit_free_share}")


@dataclass
class EngineStats:
    steps: int = 0
    decode_steps: int = 0
    decode_rows: int = 0  # summed over decode steps
    prefill_passes: int = 0
    prefill_tokens: int = 0  # computed
    prompt_tokens: int = 0  # looked up (computed + served from the cache)
    cached_tokens: int = 0
    scored_tokens: int = 0  # teacher forcing: prompt and response tokens asked for
    scored_cached_tokens: int = 0  # of which served from the cache
    generated_tokens: int = 0
    finished: int = 0

    def cache_share(self) -> float:
        return self.cached_tokens / self.prompt_tokens if self.prompt_tokens else 0.0


@dataclass
class Request:
    key: Hashable
    prompt: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None  # the entry seed (pipeline.policy.sampling_seeds); None: torch's generator
    tokens: list[int] = field(default_factory=list)  # sampled so far
    logprobs: list[float] = field(default_factory=list)  # one per sampled token
    finish: str = ""  # "stop" | "length" once it has ended

    @property
    def pending(self) -> int:
        """The last sampled token: the next decode step feeds it."""
        return self.tokens[-1]

    @property
    def filled(self) -> int:
        """Positions its row holds keys and values of: the prompt and every sampled token but the
        pending one (the prompt's, once prefilled and its first token sampled)."""
        return len(self.prompt) + len(self.tokens) - 1

    @property
    def context(self) -> list[int]:
        """The ids of those positions (what the prefix cache keeps when the request ends)."""
        return self.prompt + self.tokens[:-1]
