"""Drives many team state machines (pipeline.agents.team) against a model and a retriever.

Each team advances on its own clock: when every request of its current environment step has
come back and its searches have been retrieved, it ends the step and submits the next step's
requests. Teams therefore never wait for each other, and the model sees a steady stream of
requests instead of one batch per lock-step tick.

The requests go to a `Sink`, one of two:
- `EngineSink` (a backend served by a continuous-batching scheduler, `Served`: pipeline.engine):
  every request goes to that one scheduler; a sink step is one engine step.
- `TickSink` (any other PolicyBackend: SGLang over HTTP, the test doubles): everything submitted
  since the last step goes out as ONE `generate` call with one SamplingParams. Every team then
  finishes its step together, so this reproduces the lock-step ticks of docs/method.md §3 exactly.

Searches wait in a queue and go to the retriever as one batch when RETRIEVAL_BATCH queries are
waiting or the model has room for more work than it holds (its queue no longer fills its rows);
with a TickSink that is after every tick. The decision reads only the queue lengths, never the
clock, so a rollout repeated on one machine is byte-identical.

A request's sampling seed is key_seed(team seed, sample id, turn): it depends on what the
request is, not on when or beside what it runs (pipeline.policy.sampling_seeds).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Protocol, runtime_checkable

from pipeline.agents.protocol import STOP_TAGS
from pipeline.agents.team import ModelRequest, Team
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.policy.base import Generation, PolicyBackend, SamplingParams
from pipeline.policy.sampling_seeds import entry_seed, key_seed
from pipeline.retrieval.base import Retriever

# Queries sent to the retriever at once when the model is busy (E5 encodes a batch in one pass).
RETRIEVAL_BATCH = 64


def request_seed(team: Team, request: ModelRequest) -> int:
    return key_seed(team.seed, request.call.sample_id, request.call.n_turns)


class Sink(Protocol):
    """Where the driver's requests go; `step` returns those that have come back."""

    generate_calls: int  # sink steps taken

    def submit(self, request: ModelRequest) -> None: ...

    @property
    def room(self) -> bool:
        """The model has room for more work than it holds (searches need not wait for a batch)."""

    def step(self) -> list[tuple[ModelRequest, Generation]]: ...


class Scheduler(Protocol):
    """What EngineSink needs of a continuous-batching scheduler (pipeline.engine.engine.Engine)."""

    config: object  # with max_rows

    @property
    def idle(self) -> bool: ...

    @property
    def load(self) -> int: ...

    def submit(self, key: Hashable, prompt: Sequence[int], max_new_tokens: int, *, temperature: float,
               top_p: float, stop: Sequence[str], seed: int | None, priority: tuple) -> None: ...

    def step(self) -> list[tuple[Hashable, Generation]]: ...


@runtime_checkable
class Served(Protocol):
    """A backend served by a scheduler that every workflow of a rollout can share
    (pipeline.engine.backend.EngineBackend)."""

    engine: Scheduler


class TickSink:
    """Lock-step ticks over any PolicyBackend: one generate call per step."""

    def __init__(self, backend: PolicyBackend, cfg: WorkflowConfig):
        self.backend, self.cfg = backend, cfg
        self.queue: list[ModelRequest] = []
        self.generate_calls = 0

    def submit(self, request: ModelRequest) -> None:
        self.queue.append(request)

    @property
    def room(self) -> bool:
        return True

    def step(self) -> list[tuple[ModelRequest, Generation]]:
        requests, self.queue = self.queue, []
        if not requests:
            return []
        cfg = self.cfg
        params = SamplingParams(
            temperature=cfg.temperature, top_p=cfg.top_p, max_new_tokens=max(r.max_new_tokens for r in requests),
            stop=STOP_TAGS, row_seeds=tuple(request_seed(r.team, r) for r in requests),
            shared_prefixes=cfg.grouped_generation,
            row_max_new_tokens=tuple(r.max_new_tokens for r in requests) if cfg.grouped_generation else None,
        )
        out = self.backend.generate([r.prompt_ids for r in requests], params, n=1)
        self.generate_calls += 1
        if len(out) != len(requests) or any(len(g) != 1 for g in out):
            raise RuntimeError(f"backend returned {len(out)} results for {len(requests)} prompts (n=1 each)")
        return [(r, _truncate(g[0], r.max_new_tokens, self.backend)) for g, r in zip(out, requests)]


def _truncate(gen: Generation, limit: int, backend: PolicyBackend) -> Generation:
    """A generation cut to its role's budget (a tick asks for its requests' largest)."""
    if len(gen.token_ids) <= limit:
        return gen
    ids = list(gen.token_ids[:limit])
    return Generation(ids, list(gen.logprobs[:limit]), backend.decode(ids), "length")


class EngineSink:
    """Every request to one continuous-batching scheduler (pipeline.engine)."""

    def __init__(self, engine: Scheduler, cfg: WorkflowConfig):
        self.engine, self.cfg = engine, cfg
        if not self.engine.idle:
            raise RuntimeError("engine: a rollout started while another is running on it")
        self.generate_calls = 0
        self._requests: dict[int, ModelRequest] = {}
        self._next = 0

    def submit(self, request: ModelRequest) -> None:
        key, self._next = self._next, self._next + 1
        self._requests[key] = request
        self.engine.submit(key, request.prompt_ids, request.max_new_tokens, temperature=self.cfg.temperature,
                           top_p=self.cfg.top_p, stop=STOP_TAGS,
                           seed=entry_seed(request_seed(request.team, request), 0), priority=(request.team.order,))

    @property
    def room(self) -> bool:
        return self.engine.load < self.engine.config.max_rows

    def step(self) -> list[tuple[ModelRequest, Generation]]:
        self.generate_calls += 1
        return [(self._requests.pop(key), gen) for key, gen in self.engine.step()]


def make_sink(backend: PolicyBackend, cfg: WorkflowConfig) -> Sink:
    """The backend's own scheduler when it is `Served` by one, else lock-step ticks."""
    return EngineSink(backend.engine, cfg) if isinstance(backend, Served) else TickSink(backend, cfg)


class Driver:
    """Runs teams to the end; `on_done(team)` is called as each one finishes."""

    def __init__(self, sink: Sink, retriever: Retriever, cfg: WorkflowConfig,
                 backend: PolicyBackend, on_done: Callable[[Team], None] | None = None):
        self.sink, self.retriever, self.cfg, self.backend, self.on_done = sink, retriever, cfg, backend, on_done
        self.step_of: dict[int, int] = {}
        self.outstanding: dict[int, int] = {}  # requests of the team's current step not yet back
        self.unsearched: dict[int, int] = {}  # its searches not yet retrieved
        self.searches: list[tuple[ModelRequest, str]] = []
        self.search_calls = 0

    def start(self, teams: Sequence[Team]) -> None:
        """Submit every team's first step (the driver keeps no list of the teams: a finished team
        is freed once its owner lets go of it)."""
        for order, team in enumerate(teams):
            team.order = order
            self.step_of[id(team)] = 0
            self._start(team)

    def drive(self) -> None:
        """Step until every started team has finished."""
        while any(self.outstanding.values()) or self.searches:
            ready: dict[int, Team] = {}  # in the order their steps' last requests came back
            for request, gen in self.sink.step():
                team = request.team
                query = team.receive(request, gen, self.step_of[id(team)])
                if query is not None:
                    self.searches.append((request, query))
                    self.unsearched[id(team)] += 1
                self.outstanding[id(team)] -= 1
                if self.outstanding[id(team)] == 0:
                    ready.setdefault(id(team), team)
            if self.searches and (len(self.searches) >= RETRIEVAL_BATCH or self.sink.room):
                for team in self._retrieve():
                    ready.setdefault(id(team), team)
            for team in ready.values():
                if not team.done and self.outstanding[id(team)] == 0 and self.unsearched[id(team)] == 0:
                    self._end_step(team)

    def _start(self, team: Team) -> None:
        step = self.step_of[id(team)]
        if step > self.cfg.budget(team.traj.workflow) + 1:  # a safety net: every phase ends within the budget
            raise RuntimeError(f"{team.traj.trajectory_id}: did not finish within {step} steps")
        requests = team.requests(step)
        self.outstanding[id(team)] = len(requests)
        self.unsearched[id(team)] = 0
        for request in requests:
            self.sink.submit(request)
        if not requests:
            self._end_step(team)

    def _retrieve(self) -> list[Team]:
        searches, self.searches = self.searches, []
        self.search_calls += 1
        results = self.retriever.search([q for _, q in searches], self.cfg.top_k)
        if len(results) != len(searches):
            raise RuntimeError(f"retriever returned {len(results)} results for {len(searches)} queries")
        teams = []
        for (request, _), passages in zip(searches, results):
            request.searcher.observe(passages, self.backend)
            self.unsearched[id(request.team)] -= 1
            if self.unsearched[id(request.team)] == 0:
                teams.append(request.team)
        return teams

    def _end_step(self, team: Team) -> None:
        step = self.step_of[id(team)]
        team.end_tick(step)
        self.step_of[id(team)] = step + 1
        if team.done:
            for table in (self.step_of, self.outstanding, self.unsearched):
                del table[id(team)]
            if self.on_done is not None:
                self.on_done(team)
        else:
            self._start(team)
