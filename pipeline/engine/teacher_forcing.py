"""Teacher-forced log-probs of responses, packed, with the prompts shared through the prefix cache.

Pairs (prompt, response) are cut into passes of at most `pass_tokens` new tokens. Each pair
looks up its prompt in the prefix cache (an Answerer's 5 candidates share one prompt; a Teacher
scores many samples of one trajectory), computes only the rest in one packed forward pass with
the other pairs of its pass, takes logits only where a response token is predicted, and leaves
its prompt in the cache. A pair whose uncached start another pair of the same pass computes
waits for the next pass (pipeline.engine.scheduler.pick, the engine's admission step too).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import torch

from pipeline.engine.attention import Segment, Segments
from pipeline.engine.base import EngineStats
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.engine.qwen3 import Qwen3Weights, forward_hidden, logits_of
from pipeline.engine.scheduler import pick


def score_pairs(weights: Qwen3Weights, cache: PrefixCache, prompts: Sequence[Sequence[int]],
                responses: Sequence[Sequence[int]], temperature: float = 1.0, pass_tokens: int = 8192,
                device: torch.device | str = "cpu", stats: EngineStats | None = None) -> list[list[float]]:
    """log softmax(logits / temperature) of every response token given everything before it."""
    out: list[list[float]] = [[] for _ in prompts]
    todo = deque(i for i, r in enumerate(responses) if len(r))
    layers = weights.current()
    while todo:
        chosen = pick(todo, lambda i: list(prompts[i]), lambda i, cached: len(prompts[i]) + len(responses[i]) - cached,
                      cache, pass_tokens)
        for _ in range(chosen.consumed):
            todo.popleft()
        todo.extendleft(reversed(chosen.deferred))
        picked = [(p.item, p.cached, p.parts) for p in chosen.picked]
        if stats is not None:
            stats.scored_tokens += sum(len(prompts[i]) + len(responses[i]) for i, _, _ in picked)
            stats.scored_cached_tokens += sum(cached for _, cached, _ in picked)
        _score_pass(weights, layers, cache, prompts, responses, picked, temperature, device, out)
        cache.tick()
    return out


def _score_pass(weights, layers, cache, prompts, responses, picked, temperature, device, out) -> None:
    ids, positions, segments, wanted, labels = [], [], [], [], []
    offset = 0
    for i, cached, parts in picked:
        full = list(prompts[i]) + list(responses[i])
        n = len(full) - cached
        ids.extend(full[cached:])
        positions.extend(range(cached, len(full)))
        segments.append(Segment(n, prefix=[cache.gather(parts)] if parts else None))
        # position t predicts token t + 1: response token j (at len(prompt) + j) from position len(prompt) + j - 1
        first = len(prompts[i]) - 1 - cached
        wanted.extend(range(offset + first, offset + first + len(responses[i])))
        labels.extend(responses[i])
        offset += n
    attention = Segments(weights.shape, segments, keep=cache.budget > 0)
    with torch.inference_mode():
        hidden = forward_hidden(weights, layers, torch.tensor(ids, device=device),
                                torch.tensor(positions, device=device), attention)
        logits = logits_of(weights, hidden[torch.tensor(wanted, device=device)]).float()
        if temperature != 1.0:
            logits = logits / temperature
        logp = torch.log_softmax(logits, dim=-1).gather(-1, torch.tensor(labels, device=device)[:, None])[:, 0]
        values = logp.tolist()
        start = 0
        for index, (i, _, _) in enumerate(picked):
            out[i] = values[start:start + len(responses[i])]
            start += len(responses[i])
            if cache.budget:  # inside inference mode, as the engine's own inserts are: one slab for both
                kv = attention.full_kv(index)
                cache.insert(list(prompts[i]), lambda a, b, kv=kv: kv[:, :, a:b])
