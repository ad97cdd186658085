"""The generation engine: a step-synchronous scheduler with continuous batching over a KV pool.

Requests (prompt ids, token budget, stop strings, sampling seed) wait by priority, then in
submission order (a rollout gives each team's requests the team's place, so earlier teams run
to their end first and their trajectories are handed back and freed early). Each `step()`:

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

import heapq
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from pipeline.engine.attention import KVPool, PoolPrefill, RegionsDecode
from pipeline.engine.memory import give_back
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
# Steps between handing freed memory back to the system (pipeline.engine.memory).
GIVE_BACK_EVERY = 64
# Rows are kept in regions by the positions their request can reach (prompt + token budget), so
# a decode step reads each region's keys only up to its own longest row (docs/profile.md#the-engine).
REGION_CAPACITIES = (128, 192, 256, 384, 512, 768)


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


@dataclass
class Region:
    """Rows whose request needs at most `pool.capacity` positions (prompt + token budget): a decode
    step attends over a region's rows up to its longest row only, so short rows never pay for the
    longest context in flight. Rows 0..len(running)-1 of the pool are the running ones."""

    pool: KVPool
    running: list[Request] = field(default_factory=list)
    lengths: list[int] = field(default_factory=list)  # filled positions of each row
    pending: list[int] = field(default_factory=list)  # the sampled, not yet fed token of each row


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
        self.classes = sorted({c for c in REGION_CAPACITIES if c < self.capacity} | {self.capacity})
        self.regions: dict[int, Region] = {}  # by capacity, made when first needed
        self._version: tuple | None = None
        self.waiting: list[tuple[tuple, int, Request]] = []  # a heap: (priority, submission number, request)
        self._submitted = 0
        self._checkers: dict[tuple[str, ...], StopStringChecker] = {}

    # -- submission --------------------------------------------------------------------------

    def submit(self, key: Hashable, prompt: Sequence[int], max_new_tokens: int, *, temperature: float = 1.0,
               top_p: float = 1.0, stop: Sequence[str] = (), seed: int | None = None,
               priority: tuple = ()) -> None:
        """Queue a request; waiting requests are admitted by `priority`, then in submission order."""
        if max_new_tokens < 1 or max_new_tokens >= self.capacity:
            raise InputError(f"max_new_tokens: expected 1..{self.capacity - 1}, got {max_new_tokens}")
        if not prompt:
            raise InputError(f"request {key!r}: expected a prompt of at least one token")
        prompt = list(prompt)[-(self.capacity - max_new_tokens):]
        request = Request(key, prompt, max_new_tokens, float(temperature), float(top_p),
                          tuple(s for s in stop if s), seed)
        heapq.heappush(self.waiting, (tuple(priority), self._submitted, request))
        self._submitted += 1

    @property
    def running(self) -> int:
        return sum(len(r.running) for r in self.regions.values())

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
        version = self.weights.version
        if version != self._version:
            if self.running:
                raise RuntimeError("engine: the model's weights changed while requests were decoding")
            self.cache.clear()
            self._version = version

    def _region(self, positions: int) -> Region:
        capacity = next(c for c in self.classes if c >= positions)
        region = self.regions.get(capacity)
        if region is None:
            dtype = self.weights.matmul_dtype or self.weights.embed.dtype
            region = self.regions[capacity] = Region(
                KVPool(self.weights.shape, self.config.max_rows, capacity, dtype, self.device))
        return region

    def _active(self) -> list[Region]:
        return [self.regions[c] for c in sorted(self.regions) if self.regions[c].running]

    def _admit(self, layers) -> list[Row]:
        """Prefill the requests admitted this step; returns their rows."""
        free = self.config.max_rows - self.running
        if not self.waiting or free == 0:
            return []
        if self.running and free < self.config.admit_free_share * self.config.max_rows:
            return []
        picked: list[tuple[Request, int, list[torch.Tensor]]] = []
        deferred: list[tuple[tuple, int, Request]] = []
        budget = self.config.prefill_tokens
        starts: set[tuple[int, ...]] = set()  # the uncached starts this round computes
        scanned = 0
        while self.waiting and len(picked) < free and scanned < SCAN_FACTOR * free:
            scanned += 1
            request = self.waiting[0][2]
            cached, parts = self.cache.match(request.prompt, limit=len(request.prompt) - 1)
            new = len(request.prompt) - cached
            head = tuple(request.prompt[cached:cached + MIN_SHARED])
            if self.cache.budget and len(head) == MIN_SHARED and head in starts:
                deferred.append(heapq.heappop(self.waiting))  # next round finds this start cached
                continue
            if picked and new > budget:
                break
            heapq.heappop(self.waiting)
            budget -= new
            starts.add(head)
            picked.append((request, cached, parts))
        for entry in deferred:
            heapq.heappush(self.waiting, entry)
        if not picked:
            return []
        rows: list[Row] = []
        begin, end = [], []
        for request, cached, parts in picked:
            region = self._region(len(request.prompt) + request.max_new_tokens)
            row = len(region.running)
            region.running.append(request)
            region.lengths.append(len(request.prompt))
            region.pending.append(0)
            region.pool.write(row, 0, [self.cache.gather(parts)] if parts else [])
            rows.append((region, row))
            begin.append(cached)
            end.append(len(request.prompt))
            self.stats.prompt_tokens += len(request.prompt)
            self.stats.cached_tokens += cached
        ids = torch.tensor([t for r, c, _ in picked for t in r.prompt[c:]], dtype=torch.long, device=self.device)
        positions = torch.cat([torch.arange(b, e) for b, e in zip(begin, end)]).to(self.device)
        self.stats.prefill_passes += 1
        self.stats.prefill_tokens += int(ids.shape[0])
        attention = PoolPrefill([(region.pool, row) for region, row in rows], begin, end)
        hidden = forward_hidden(self.weights, layers, ids, positions, attention)
        last = torch.tensor(np.cumsum([e - b for b, e in zip(begin, end)]) - 1, device=self.device)
        tokens = self._sample([r for r, _, _ in picked], logits_of(self.weights, hidden[last]))
        for (region, row), token in zip(rows, tokens):
            region.pending[row] = token
            self.cache.insert(region.running[row].prompt, self._source(region, row))
        return rows

    @staticmethod
    def _source(region: Region, row: int):
        return lambda start, end: region.pool.read(row, start, end)

    def _decode(self, layers) -> list[Row]:
        """Feed every row's pending token, sample the next; the rows that ended."""
        active = self._active()
        ids = torch.tensor([t for r in active for t in r.pending], dtype=torch.long, device=self.device)
        parts = [(r.pool, torch.tensor(r.lengths, dtype=torch.long, device=self.device)) for r in active]
        positions = torch.cat([p for _, p in parts])
        hidden = forward_hidden(self.weights, layers, ids, positions, RegionsDecode(parts))
        rows = [(r, i) for r in active for i in range(len(r.running))]
        self.stats.decode_steps += 1
        self.stats.decode_rows += len(rows)
        for region in active:
            region.lengths = [n + 1 for n in region.lengths]
        tokens = self._sample([r.running[i] for r, i in rows], logits_of(self.weights, hidden))
        for (region, i), token in zip(rows, tokens):
            region.pending[i] = token
        return self._ended(rows)

    def _sample(self, requests: list[Request], logits: torch.Tensor) -> list[int]:
        """The next token of each request (logits in the same order), recorded on it."""
        tokens = [0] * len(requests)
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
                tokens[j] = token
        self.stats.generated_tokens += len(requests)
        return tokens

    def _ended(self, rows: Sequence[Row]) -> list[Row]:
        """The rows whose last token ends their request (stop string, EOS, budget), marked."""
        by_stop: dict[tuple[str, ...], list[Row]] = {}
        for region, i in rows:
            by_stop.setdefault(region.running[i].stop, []).append((region, i))
        ended = []
        for stop, members in by_stop.items():
            checker = self._checkers.get(stop)
            if checker is None:
                checker = self._checkers[stop] = StopStringChecker(self.tokenizer, stop)
            hits = checker.hits([region.running[i].tokens for region, i in members])
            for (region, i), hit in zip(members, hits):
                request = region.running[i]
                if hit or request.tokens[-1] in self.eos_ids:
                    request.finish = "stop"
                elif len(request.tokens) >= request.max_new_tokens:
                    request.finish = "length"
                if request.finish:
                    ended.append((region, i))
        return ended

    def _finish(self, ended: list[Row]) -> list[tuple[Hashable, Generation]]:
        """Hand back the ended requests, cache their contexts, and move each region's last running
        rows into its holes, so its rows 0..B-1 stay the running ones."""
        out = []
        by_region: dict[int, tuple[Region, list[int]]] = {}
        for region, i in ended:
            request = region.running[i]
            # positions 0..length-1 hold the prompt and every generated token but the last
            context = request.prompt + request.tokens[:-1]
            self.cache.insert(context[: region.lengths[i]], self._source(region, i))
            text = self.tokenizer.decode(request.tokens, skip_special_tokens=True)
            out.append((request.key, Generation(request.tokens, request.logprobs, text, request.finish)))
            by_region.setdefault(id(region), (region, []))[1].append(i)
        self.stats.finished += len(ended)
        for region, gone_rows in by_region.values():
            gone = set(gone_rows)
            size = len(region.running) - len(gone)
            holes = sorted(i for i in gone if i < size)
            movers = [i for i in range(size, len(region.running)) if i not in gone]
            order = list(range(size))
            for hole, mover in zip(holes, movers):
                region.pool.move(mover, hole, region.lengths[mover])
                order[hole] = mover
            region.running = [region.running[i] for i in order]
            region.lengths = [region.lengths[i] for i in order]
            region.pending = [region.pending[i] for i in order]
            region.pool.release(len(region.running))
        return out

    def run(self) -> list[tuple[Hashable, Generation]]:
        """Step until every submitted request has ended."""
        out = []
        while not self.idle:
            out.extend(self.step())
        return out
