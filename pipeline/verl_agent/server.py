"""A PolicyBackend over verl's async LLM server client, usable from a worker thread.

Our workflows are synchronous and batch every request of a tick into one `generate`; verl's
`LLMServerClient.generate(request_id, prompt_ids=..., sampling_params=...)` is a coroutine
for one prompt that returns a `TokenOutput` (token_ids, log_probs, stop_reason). The agent
loop runs the workflow in a worker thread; `generate` here submits one coroutine per entry to
the agent loop's event loop and waits for all of them, so the entries of a tick still run
concurrently on the rollout servers.

`sampling_params` is SGLang's (verl's SGLang server hands it to SGLang unchanged, after
popping verl's own `logprobs` flag): temperature, top_p, max_new_tokens, stop (kept in the
output: no_stop_trim) and, when `send_seed`, sampling_seed = the entry's seed (pipeline.policy.sampling_seeds).
Stop strings need the server's detokenizer: the rollout must run with skip_tokenizer_init false.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from transformers import PreTrainedTokenizerBase

from pipeline.policy.base import Generation, SamplingParams
from pipeline.policy.encoding import TokenizerText
from pipeline.verl_agent.seeds import entry_seeds

_FINISH = {"stop": "stop", "completed": "stop", "length": "length"}


class ServerError(RuntimeError):
    """The rollout server aborted a request or answered without log-probs."""


def sampling_dict(params: SamplingParams, seed: int | None) -> dict[str, Any]:
    """verl/SGLang sampling parameters of one entry."""
    out: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens,
        "no_stop_trim": True,
        "logprobs": True,
    }
    if params.stop:
        out["stop"] = list(params.stop)
    if seed is not None:
        out["sampling_seed"] = int(seed)
    return out


def to_generation(output: Any, max_new_tokens: int, decode, where: str) -> Generation:
    """verl TokenOutput -> Generation; finish "length" when the server says so (or, if it gives
    no reason, when the limit was reached)."""
    ids = [int(t) for t in output.token_ids]
    if output.log_probs is None or len(output.log_probs) != len(ids):
        raise ServerError(f"{where}: expected one log-prob per generated token (rollout.calculate_log_probs)")
    reason = output.stop_reason
    if reason in ("abort", "aborted"):
        raise ServerError(f"{where}: request aborted by the rollout server")
    finish = _FINISH.get(reason) if reason is not None else ("length" if len(ids) >= max_new_tokens else "stop")
    if finish is None:
        raise ServerError(f"{where}: unknown stop_reason {reason!r}")
    return Generation(ids, [float(x) for x in output.log_probs], decode(ids), finish)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class ServerManagerBackend(TokenizerText):
    """PolicyBackend whose `generate` goes to verl's rollout servers through `server_manager`.

    Call `generate` from a thread other than the one running `loop`. `session` is the sticky
    request id (all calls of one trajectory go to the same server, for its prefix cache).
    """

    def __init__(
        self,
        server_manager: Any,
        tokenizer: PreTrainedTokenizerBase,
        loop: asyncio.AbstractEventLoop,
        session: str,
        send_seed: bool = True,
        timeout_s: float | None = None,
    ) -> None:
        self.server_manager = server_manager
        self.tokenizer = tokenizer
        self.loop = loop
        self.session = session
        self.send_seed = send_seed
        self.timeout_s = timeout_s
        self.requests = 0
        self.global_steps: list[int] = []  # weight versions that served this backend's requests

    async def _one(self, prompt: Sequence[int], params: SamplingParams, seed: int | None, k: int) -> Generation:
        output = await self.server_manager.generate(
            self.session, prompt_ids=[int(t) for t in prompt], sampling_params=sampling_dict(params, seed)
        )
        version = (getattr(output, "extra_fields", None) or {}).get("global_steps")
        if version is not None:
            self.global_steps.append(int(version))
        return to_generation(output, params.max_new_tokens, self.decode, f"{self.session} entry {k}")

    async def _all(self, entries: list[Sequence[int]], params: SamplingParams,
                   seeds: list[int | None]) -> list[Generation]:
        return list(await asyncio.gather(*(self._one(p, params, s, k) for k, (p, s) in enumerate(zip(entries, seeds)))))

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        if _running_loop() is self.loop:
            raise RuntimeError("ServerManagerBackend.generate called on its event loop's thread (would deadlock)")
        entries = [p for p in prompts for _ in range(n)]
        self.requests += len(entries)
        seeds = entry_seeds(params, len(prompts), n) if self.send_seed else [None] * len(entries)
        flat = asyncio.run_coroutine_threadsafe(self._all(entries, params, seeds), self.loop).result(self.timeout_s)
        return [flat[i * n : (i + 1) * n] for i in range(len(prompts))]

    def score(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]) -> list[list[float]]:
        raise NotImplementedError("the policy's rollout servers do not score; the Teacher is its own server")
