"""The generation engine: a step-synchronous scheduler with continuous batching over a KV pool.

Requests (prompt ids, token budget, stop strings, sampling seed) wait in submission order. Each
`step()`:

  1. admits waiting requests into free rows, in order, while the step's prefill budget lasts
     (at least one); each copies its longest cached prefix from the prefix cache into its row and
     prefills only the rest, all admitted rows in one packed forward pass (no padding), logits only
     at each row's last position; its first token is sampled there;
  2. decodes one token for every running row in one forward pass;
  3. ends the rows that hit a stop string, EOS or their own budget, caches their contexts,
     frees their rows (the last rows move into the holes, so rows 0..B-1 stay filled) and returns
     their generations.

Nothing depends on wall time or on threads: which requests share a step is a function of what
was submitted and when, so a run repeated on one machine is byte-identical. A request's random
numbers depend on its seed and the token's index only (pipeline.policy.sampling_seeds), never on
its row or step, so the engine samples from the same distribution with the same draws as the
reference backend (pipeline.policy.hf_backend); only the floating-point sums differ.

A request admitted with a prompt whose start another request of the same admission round is
about to compute (at least MIN_SHARED tokens not yet cached) waits one round and then finds it
in the cache: the 4 runs of a question, the 5 candidates of an Answerer.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from pipeline.engine.attention import KVPool, PoolDecode, PoolPrefill
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.engine.qwen3 import Qwen3Weights, forward_hidden, logits_of
from pipeline.errors import InputError
from pipeline.policy.base import Generation
from pipeline.policy.next_token import sample_next_tokens
from pipeline.policy.sampling_seeds import keyed_uniforms
from pipeline.policy.stopping import StopStringChecker

# A common start shorter than this is not worth deferring a request for.
MIN_SHARED = 16
# An admission round looks at most this many waiting requests per free row.
SCAN_FACTOR = 4


@dataclass(frozen=True)
class EngineConfig:
    max_rows: int = 256  # rows decoding at once
    prefill_tokens: int = 4096  # new prompt tokens prefilled per step (at least one request)
    prefix_cache_tokens: int = 65536  # positions the prefix cache holds (0: off)
    # admit only when at least this share of max_rows is free (or nothing runs): fewer, larger
    # prefill passes instead of one small pass per finished row
    admit_free_share: float = 0.125

    def __post_init__(self) -> None:
        if self.max_rows < 1 or self.prefill_tokens < 1 or self.prefix_cache_tokens < 0:
            raise InputError(f"engine: expected max_rows, prefill_tokens >= 1 and prefix_cache_tokens >= 0, got {self}")
        if not 0 <= self.admit_free_share <= 1:
            raise InputError(f"engine: admit_free_share must be in [0, 1], got {self.admit_free_share}")


@dataclass
class Request:
    key: Hashable
    prompt: list[int]
    max_new_tokens: int
    temperature: float
    top_p: float
    stop: tuple[str, ...]
    seed: int | None  # the entry seed (pipeline.policy.sampling_seeds); None: torch's generator
    tokens: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish: str = ""


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


class Engine:
    def __init__(self, weights: Qwen3Weights, tokenizer, eos_ids: set[int], config: EngineConfig | None = None,
                 device: torch.device | str = "cpu"):
        self.weights, self.tokenizer, self.eos_ids = weights, tokenizer, set(eos_ids)
        self.config = config or EngineConfig()
        self.device = torch.device(device)
        self.capacity = weights.shape.max_positions
        self.cache = PrefixCache(self.config.prefix_cache_tokens)
        self.stats = EngineStats()
        self._pool: KVPool | None = None
        self._version: tuple | None = None
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []  # row i of the pool holds running[i]
        self._lengths: list[int] = []  # filled positions of each row
        self._pending = torch.empty(0, dtype=torch.long)  # the sampled, not yet fed token of each row
        self._checkers: dict[tuple[str, ...], StopStringChecker] = {}

    # -- submission --------------------------------------------------------------------------

    def submit(self, key: Hashable, prompt: Sequence[int], max_new_tokens: int, *, temperature: float = 1.0,
               top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None) -> None:
        if max_new_tokens < 1 or max_new_tokens >= self.capacity:
            raise InputError(f"max_new_tokens: expected 1..{self.capacity - 1}, got {max_new_tokens}")
        if not prompt:
            raise InputError(f"request {key!r}: expected a prompt of at least one token")
        prompt = list(prompt)[-(self.capacity - max_new_tokens):]
        self.waiting.append(Request(key, prompt, max_new_tokens, float(temperature), float(top_p),
                                    tuple(s for s in stop if s), seed))

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def load(self) -> int:
        """Requests waiting or running."""
        return len(self.waiting) + len(self.running)

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
        return out

    def check_weights(self) -> None:
        version = self.weights.version
        if version != self._version:
            if self.running:
                raise RuntimeError("engine: the model's weights changed while requests were decoding")
            self.cache.clear()
            self._version = version

    def _pool_now(self) -> KVPool:
        if self._pool is None:
            dtype = self.weights.embed.dtype
            self._pool = KVPool(self.weights.shape, self.config.max_rows, self.capacity, dtype, self.device)
        return self._pool

    def _admit(self, layers) -> list[int]:
        """Prefill the requests admitted this step; returns their rows."""
        free = self.config.max_rows - len(self.running)
        if not self.waiting or free == 0:
            return []
        if self.running and free < self.config.admit_free_share * self.config.max_rows:
            return []
        pool = self._pool_now()
        picked: list[tuple[Request, int, list[torch.Tensor]]] = []
        deferred: list[Request] = []
        budget = self.config.prefill_tokens
        starts: set[tuple[int, ...]] = set()  # the uncached starts this round computes
        scanned = 0
        while self.waiting and len(picked) < free and scanned < SCAN_FACTOR * free:
            scanned += 1
            request = self.waiting[0]
            cached, parts = self.cache.match(request.prompt, limit=len(request.prompt) - 1)
            new = len(request.prompt) - cached
            head = tuple(request.prompt[cached:cached + MIN_SHARED])
            if self.cache.budget and len(head) == MIN_SHARED and head in starts:
                deferred.append(self.waiting.popleft())  # next round finds this start cached
                continue
            if picked and new > budget:
                break
            self.waiting.popleft()
            budget -= new
            starts.add(head)
            picked.append((request, cached, parts))
        self.waiting.extendleft(reversed(deferred))
        if not picked:
            return []
        rows, begin, end = [], [], []
        for request, cached, parts in picked:
            row = len(self.running)
            self.running.append(request)
            self._lengths.append(len(request.prompt))
            pool.write(row, 0, parts)
            rows.append(row)
            begin.append(cached)
            end.append(len(request.prompt))
            self.stats.prompt_tokens += len(request.prompt)
            self.stats.cached_tokens += cached
        ids = torch.tensor([t for r, c, _ in picked for t in r.prompt[c:]], dtype=torch.long, device=self.device)
        positions = torch.cat([torch.arange(b, e) for b, e in zip(begin, end)]).to(self.device)
        self.stats.prefill_passes += 1
        self.stats.prefill_tokens += int(ids.shape[0])
        hidden = forward_hidden(self.weights, layers, ids, positions, PoolPrefill(pool, rows, begin, end))
        last = torch.tensor(np.cumsum([e - b for b, e in zip(begin, end)]) - 1, device=self.device)
        tokens = self._sample(rows, logits_of(self.weights, hidden[last]))
        self._pending = torch.cat([self._pending, tokens])
        for (request, _, _), row in zip(picked, rows):
            self.cache.insert(request.prompt, self._source(row))
        return rows

    def _source(self, row: int):
        pool = self._pool
        return lambda start, end: pool.read(row, start, end)

    def _decode(self, layers) -> list[int]:
        """Feed every row's pending token, sample the next; the rows that ended."""
        batch = len(self.running)
        positions = torch.tensor(self._lengths, dtype=torch.long, device=self.device)
        hidden = forward_hidden(self.weights, layers, self._pending, positions, PoolDecode(self._pool, positions))
        self.stats.decode_steps += 1
        self.stats.decode_rows += batch
        self._lengths = [n + 1 for n in self._lengths]
        rows = list(range(batch))
        self._pending = self._sample(rows, logits_of(self.weights, hidden))
        return self._ended(rows)

    def _sample(self, rows: list[int], logits: torch.Tensor) -> torch.Tensor:
        """The next token of each of `rows` (logits in the same order), recorded on its request."""
        requests = [self.running[i] for i in rows]
        tokens = torch.empty(len(rows), dtype=torch.long, device=self.device)
        groups: dict[tuple[float, float], list[int]] = {}
        for j, r in enumerate(requests):
            groups.setdefault((r.temperature, r.top_p), []).append(j)
        for (temperature, top_p), members in groups.items():
            uniforms = None
            seeded = [j for j in members if requests[j].seed is not None]
            if temperature > 0 and seeded and len(seeded) == len(members):
                seeds = np.array([requests[j].seed for j in members], dtype=np.uint64)
                positions = np.array([len(requests[j].tokens) for j in members], dtype=np.int64)
                uniforms = torch.from_numpy(keyed_uniforms(seeds, positions)).to(self.device)
            index = torch.tensor(members, device=self.device)
            picked, logps = sample_next_tokens(logits[index], temperature, top_p, uniforms)
            tokens[index] = picked
            for j, token, logp in zip(members, picked.tolist(), logps.tolist()):
                requests[j].tokens.append(token)
                requests[j].logprobs.append(logp)
        self.stats.generated_tokens += len(rows)
        return tokens

    def _ended(self, rows: Sequence[int]) -> list[int]:
        """Mark the requests of `rows` whose last token ends them (stop string, EOS, budget)."""
        by_stop: dict[tuple[str, ...], list[int]] = {}
        for i in rows:
            by_stop.setdefault(self.running[i].stop, []).append(i)
        ended = set()
        for stop, members in by_stop.items():
            checker = self._checkers.get(stop)
            if checker is None:
                checker = self._checkers[stop] = StopStringChecker(self.tokenizer, stop)
            hits = checker.hits([self.running[i].tokens for i in members])
            for i, hit in zip(members, hits):
                request = self.running[i]
                if hit or request.tokens[-1] in self.eos_ids:
                    request.finish = "stop"
                elif len(request.tokens) >= request.max_new_tokens:
                    request.finish = "length"
                if request.finish:
                    ended.add(i)
        return sorted(ended)

    def _finish(self, ended: list[int]) -> list[tuple[Hashable, Generation]]:
        """Hand back the ended requests, cache their contexts, and move the last running rows into
        the holes, so rows 0..B-1 stay the running ones."""
        out = []
        for i in ended:
            request = self.running[i]
            # positions 0..length-1 hold the prompt and every generated token but the last
            context = request.prompt + request.tokens[:-1]
            self.cache.insert(context[: self._lengths[i]], self._source(i))
            text = self.tokenizer.decode(request.tokens, skip_special_tokens=True)
            out.append((request.key, Generation(request.tokens, request.logprobs, text, request.finish)))
        if not ended:
            return out
        self.stats.finished += len(ended)
        gone = set(ended)
        size = len(self.running) - len(ended)
        holes = [i for i in ended if i < size]
        movers = [i for i in range(size, len(self.running)) if i not in gone]
        order = list(range(size))
        for hole, mover in zip(holes, movers):
            self._pool.move(mover, hole, self._lengths[mover])
            order[hole] = mover
        self.running = [self.running[i] for i in order]
        self._lengths = [self._lengths[i] for i in order]
        self._pending = self._pending[torch.tensor(order, dtype=torch.long, device=self.device)]
        return out

    def run(self) -> list[tuple[Hashable, Generation]]:
        """Step until every submitted request has ended."""
        out = []
        while not self.idle:
            out.extend(self.step())
        return out
