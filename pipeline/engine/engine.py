"""The generation engine: a step-synchronous scheduler with continuous batching over a KV pool.

Requests (prompt ids, token budget, stop strings, sampling seed) wait by priority, then in
submission order (pipeline.engine.scheduler.Waiting). Each `step()`:

  1. admits waiting requests into free rows (pipeline.engine.scheduler: which ones); each copies
     its longest cached prefix from the prefix cache into its row and prefills only the rest, all
     admitted rows in one packed forward pass (no padding), logits only at each row's last
     position; its first token is sampled there;
  2. decodes one token for every running row in one forward pass;
  3. ends the rows that hit a stop string, EOS or their own budget, caches their contexts,
     frees their rows (pipeline.engine.kv_pool.Region.remove) and returns their generations.

Each step's attention metadata (where every token's keys go, what it attends to) is built here
and handed to the forward pass explicitly (pipeline.engine.attention), never kept in globals.

Nothing depends on wall time or on threads: which requests share a step is a function of what
was submitted and when, and the prefix cache's recency is a step count, so a run repeated on one
machine is byte-identical. A request's random numbers depend on its seed and the token's index
only (pipeline.policy.sampling_seeds), never on its row or step, so the engine samples from the
same distribution with the same draws as the reference backend (pipeline.policy.hf_backend);
only the floating-point sums differ.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Hashable, Sequence

import numpy as np
import torch

from pipeline.engine.attention import PoolPrefill, RegionsDecode
from pipeline.engine.base import EngineConfig, EngineStats, Request
from pipeline.engine.kv_pool import Region, Regions
from pipeline.engine.memory import give_back
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.engine.qwen3 import Qwen3Weights, forward_hidden, logits_of
from pipeline.engine.scheduler import Waiting
from pipeline.errors import InputError
from pipeline.policy.base import Generation
from pipeline.policy.encoding import truncate_left
from pipeline.policy.next_token import sample_next_tokens
from pipeline.policy.sampling_seeds import keyed_uniforms
from pipeline.policy.stopping import StopStringChecker

# Steps between handing freed memory back to the system (pipeline.engine.memory).
GIVE_BACK_EVERY = 64

Row = tuple[Region, int]


class Engine:
    def __init__(self, weights: Qwen3Weights, tokenizer, eos_ids: set[int], config: EngineConfig | None = None,
                 device: torch.device | str = "cpu"):
        self.weights, self.tokenizer, self.eos_ids = weights, tokenizer, set(eos_ids)
        self.config = config or EngineConfig()
        self.device = torch.device(device)
        self.capacity = weights.shape.max_positions
        self.cache = PrefixCache(self.config.prefix_cache_tokens)
        self.stats = EngineStats()
        self.waiting = Waiting(self.config, self.cache)
        self.regions = Regions(weights.shape, self.config.max_rows, self.capacity, self.device)
        self._version: tuple | None = None
        self._checkers: dict[tuple[str, ...], StopStringChecker] = {}

    # -- submission --------------------------------------------------------------------------

    def submit(self, key: Hashable, prompt: Sequence[int], max_new_tokens: int, *, temperature: float = 1.0,
               top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None,
               priority: tuple = ()) -> None:
        """Queue a request; waiting requests are admitted by `priority`, then in submission order.
        A prompt longer than the context leaves room for is cut from the left (with a warning)."""
        if max_new_tokens < 1 or max_new_tokens >= self.capacity:
            raise InputError(f"max_new_tokens: expected 1..{self.capacity - 1}, got {max_new_tokens}")
        if not prompt:
            raise InputError(f"request {key!r}: expected a prompt of at least one token")
        request = Request(key, truncate_left(prompt, self.capacity - max_new_tokens), max_new_tokens,
                          float(temperature), float(top_p), tuple(s for s in stop if s), seed)
        self.waiting.push(request, priority)

    @property
    def running(self) -> int:
        return self.regions.running

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def load(self) -> int:
        """Requests waiting or running."""
        return len(self.waiting) + self.running

    # -- one step ----------------------------------------------------------------------------

    def step(self) -> list[tuple[Hashable, Generation]]:
        """Admit, prefill, decode one token for every row; the requests that ended this step."""
        if self.idle:
            return []
        self.check_weights()
        self.stats.steps += 1
        self.cache.tick()
        layers = self.weights.current()
        with torch.inference_mode():
            out = self._finish(self._ended(self._admit(layers)))
            if self.running:
                out += self._finish(self._decode(layers))
        if self.stats.steps % GIVE_BACK_EVERY == 0 or self.idle:
            give_back()
        return out

    def check_weights(self) -> None:
        """Clear the prefix cache when the weights changed (its keys and values are of the old ones)."""
        version = self.weights.version
        if version != self._version:
            if self.running:
                raise RuntimeError("engine: the model's weights changed while requests were decoding")
            self.cache.clear()
            self._version = version

    def state_dict(self) -> dict:
        """What decides this engine's later floats between rollouts (it must be idle): the prefix
        cache when it holds keys and values of the current weights (else it is cleared at the
        next step anyway) and the counters. pipeline.rl.run_state keeps it in a checkpoint."""
        if not self.idle:
            raise RuntimeError("engine: state asked for while requests are running")
        fresh = self._version is not None and self._version == self.weights.version
        return {"fresh": fresh, "clock": self.cache.clock, "stats": dataclasses.asdict(self.stats),
                "cache": self.cache.state_dict() if fresh else None}

    def load_state_dict(self, state: dict) -> None:
        """The engine as `state_dict` saw it, its weights already restored."""
        if not self.idle:
            raise RuntimeError("engine: state loaded while requests are running")
        if state["fresh"]:
            self.cache.load_state_dict(state["cache"], self.device)
            self._version = self.weights.version
        else:
            self.cache.clear()
            self._version = None
        self.cache.clock = int(state["clock"])
        self.stats = EngineStats(**state["stats"])

    def reset(self) -> None:
        """Forget everything earlier work left (an evaluation block starts here): the cached
        prefixes and the recency clock."""
        if not self.idle:
            raise RuntimeError("engine: reset while requests are running")
        self.cache.clear()
        self.cache.clock = 0

    def _admit(self, layers) -> list[Row]:
        """Prefill the requests admitted this step; returns their rows."""
        picked = self.waiting.admit(self.running)
        if not picked:
            return []
        dtype = self.weights.matmul_dtype or self.weights.embed.dtype
        rows: list[Row] = []
        begin, end = [], []
        for p in picked:
            request = p.item
            region = self.regions.place(len(request.prompt) + request.max_new_tokens, dtype)
            row = region.add(request)
            region.pool.write(row, 0, [self.cache.gather(p.parts)] if p.parts else [])
            rows.append((region, row))
            begin.append(p.cached)
            end.append(len(request.prompt))
            self.stats.prompt_tokens += len(request.prompt)
            self.stats.cached_tokens += p.cached
        ids = torch.tensor([t for p in picked for t in p.item.prompt[p.cached:]], dtype=torch.long,
                           device=self.device)
        positions = torch.cat([torch.arange(b, e) for b, e in zip(begin, end)]).to(self.device)
        self.stats.prefill_passes += 1
        self.stats.prefill_tokens += int(ids.shape[0])
        attention = PoolPrefill([(region.pool, row) for region, row in rows], begin, end)
        hidden = forward_hidden(self.weights, layers, ids, positions, attention)
        last = torch.tensor(np.cumsum([e - b for b, e in zip(begin, end)]) - 1, device=self.device)
        self._sample([p.item for p in picked], logits_of(self.weights, hidden[last]))
        for region, row in rows:
            self.cache.insert(region.requests[row].prompt, self._source(region, row))
        return rows

    @staticmethod
    def _source(region: Region, row: int):
        return lambda start, end: region.pool.read(row, start, end)

    def _decode(self, layers) -> list[Row]:
        """Feed every row's pending token, sample the next; the rows that ended."""
        active = self.regions.active()
        ids = torch.tensor([q.pending for r in active for q in r.requests], dtype=torch.long, device=self.device)
        parts = [(r.pool, torch.tensor([q.filled for q in r.requests], dtype=torch.long, device=self.device))
                 for r in active]
        positions = torch.cat([p for _, p in parts])
        hidden = forward_hidden(self.weights, layers, ids, positions, RegionsDecode(parts))
        rows = [(r, i) for r in active for i in range(len(r.requests))]
        self.stats.decode_steps += 1
        self.stats.decode_rows += len(rows)
        self._sample([r.requests[i] for r, i in rows], logits_of(self.weights, hidden))
        return self._ended(rows)

    def _sample(self, requests: list[Request], logits: torch.Tensor) -> None:
        """The next token of each request (logits in the same order), recorded on it."""
        groups: dict[tuple[float, float], list[int]] = {}
        for j, r in enumerate(requests):
            groups.setdefault((r.temperature, r.top_p), []).append(j)
        for (temperature, top_p), members in groups.items():
            uniforms = None
            if temperature > 0 and all(requests[j].seed is not None for j in members):
                seeds = np.array([requests[j].seed for j in members], dtype=np.uint64)
                positions = np.array([len(requests[j].tokens) for j in members], dtype=np.int64)
                uniforms = torch.from_numpy(keyed_uniforms(seeds, positions)).to(self.device)
            chosen = logits if len(members) == len(requests) else logits[torch.tensor(members, device=self.device)]
            picked, logps = sample_next_tokens(chosen, temperature, top_p, uniforms)
            for j, token, logp in zip(members, picked.tolist(), logps.tolist()):
                requests[j].tokens.append(token)
                requests[j].logprobs.append(logp)
        self.stats.generated_tokens += len(requests)

    def _ended(self, rows: Sequence[Row]) -> list[Row]:
        """The rows whose last token ends their request (stop string, EOS, budget), marked."""
        by_stop: dict[tuple[str, ...], list[Row]] = {}
        for region, i in rows:
            by_stop.setdefault(region.requests[i].stop, []).append((region, i))
        ended = []
        for stop, members in by_stop.items():
            checker = self._checkers.get(stop)
            if checker is None:
                checker = self._checkers[stop] = StopStringChecker(self.tokenizer, stop)
            hits = checker.hits([region.requests[i].tokens for region, i in members])
            for (region, i), hit in zip(members, hits):
                request = region.requests[i]
                if hit or request.tokens[-1] in self.eos_ids:
                    request.finish = "stop"
                elif len(request.tokens) >= request.max_new_tokens:
                    request.finish = "length"
                if request.finish:
                    ended.append((region, i))
        return ended

    def _finish(self, ended: list[Row]) -> list[tuple[Hashable, Generation]]:
        """Hand back the ended requests, cache their contexts, and free their rows."""
        out = []
        gone: dict[int, tuple[Region, list[int]]] = {}
        for region, i in ended:
            request = region.requests[i]
            self.cache.insert(request.context, self._source(region, i))
            text = self.tokenizer.decode(request.tokens, skip_special_tokens=True)
            out.append((request.key, Generation(request.tokens, request.logprobs, text, request.finish)))
            gone.setdefault(id(region), (region, []))[1].append(i)
        self.stats.finished += len(ended)
        for region, rows in gone.values():
            region.remove(rows)
        return out

    def run(self) -> list[tuple[Hashable, Generation]]:
        """Step until every submitted request has ended."""
        out = []
        while not self.idle:
            out.extend(self.step())
        return out
