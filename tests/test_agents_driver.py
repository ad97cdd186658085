"""The rollout driver (pipeline.agents.driver): teams on their own clocks against a continuous-batching
engine give exactly the trajectories of lock-step ticks, searches are batched across teams, and an
evaluation's batches are handed back as each one finishes."""

from __future__ import annotations

import hashlib
import heapq
import re
from types import SimpleNamespace

import pytest

from pipeline.agents.workflows import run_workflow, run_workflows
from pipeline.policy.base import SamplingParams
from tests.helpers.configs import workflow_cfg
from tests.helpers.fakes import FakeRetriever, SeededBackend, field_of, make_questions, role_of

BIG = dict(leader_max_new_tokens=400, searcher_max_new_tokens=300, answerer_max_new_tokens=100,
           max_searcher_turns=4, n_candidates=2)


def varied(context: str, draw: int) -> str:
    """A team whose choices depend on its draws: 0-2 searches per Searcher, 1-2 waves of 1-3 tasks."""
    role = role_of(context)
    if role == "searcher":
        turn = context.count("<information>")
        if turn < draw % 3:
            return f"<search>{field_of(context, 'Task')} {turn}</search> trailing"
        return f"<report>found {draw % 7}</report>"
    if role == "answerer":
        return f"<answer>paris {draw % 2}</answer>"
    ids = re.findall(r"^(R[0-9]+) \[", context, re.MULTILINE)
    if not ids or (len(ids) < 3 and draw % 2):
        tasks = "".join(f"<task>part {len(ids) + i}</task>" for i in range(1 + draw % 3))
        return f"<dispatch>{tasks}</dispatch>"
    return f"<answer_with>{','.join(ids)}</answer_with>"


class FakeEngine:
    """The engine's interface over a scripted backend: each request ends 1 to 3 steps after it is
    admitted (by its text), at most `max_rows` at once, admitted by priority, then submission order."""

    def __init__(self, backend: SeededBackend, max_rows: int):
        self.backend, self.config = backend, SimpleNamespace(max_rows=max_rows)
        self.waiting: list = []
        self.running: list = []
        self.submitted = 0

    def submit(self, key, prompt, max_new_tokens, *, temperature, top_p, stop, seed, priority):
        params = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens,
                                stop=tuple(stop), row_seeds=(seed,))
        gen = self.backend.generate([prompt], params)[0][0]
        delay = 1 + hashlib.sha256(gen.text.encode()).digest()[0] % 3
        heapq.heappush(self.waiting, (priority, self.submitted, [key, gen, delay]))
        self.submitted += 1

    @property
    def idle(self) -> bool:
        return not self.waiting and not self.running

    @property
    def load(self) -> int:
        return len(self.waiting) + len(self.running)

    def step(self):
        while self.waiting and len(self.running) < self.config.max_rows:
            self.running.append(heapq.heappop(self.waiting)[2])
        for entry in self.running:
            entry[2] -= 1
        done = [(key, gen) for key, gen, left in self.running if left == 0]
        self.running = [entry for entry in self.running if entry[2] > 0]
        return done


class EngineLike(SeededBackend):
    def __init__(self, script, max_rows: int):
        super().__init__(script)
        self.engine = FakeEngine(SeededBackend(script), max_rows)


def summary(rollout) -> list:
    return [(t.trajectory_id, t.steps, t.waves, t.c_tool, t.forced_answer,
             [(c.sample_id, c.step, c.response_text, c.n_turns, c.finish_reason) for c in t.calls])
            for t in rollout.trajectories]


@pytest.mark.parametrize("workflow", ["cascade", "hierarchy"])
@pytest.mark.parametrize("max_rows", [3, 50])
def test_independent_clocks_give_the_lockstep_trajectories(workflow, max_rows):
    cfg = workflow_cfg(**BIG)
    questions = make_questions(5)
    tick_retriever, retriever = FakeRetriever(), FakeRetriever()
    ticks = run_workflow(workflow, questions, SeededBackend(varied), tick_retriever, cfg, n_traj=3, seed=11)
    engine_like = EngineLike(varied, max_rows)
    ours = run_workflow(workflow, questions, engine_like, retriever, cfg, n_traj=3, seed=11)
    assert summary(ours) == summary(ticks)
    assert engine_like.engine.idle and not engine_like.generate_calls  # every request went to the engine
    assert len({t.steps for t in ours.trajectories}) > 1  # the teams really did run on different clocks
    queries = [sorted(q for call in r.calls for q in call) for r in (retriever, tick_retriever)]
    assert queries[0] == queries[1]


def test_searches_wait_for_a_batch_while_the_engine_is_full():
    cfg = workflow_cfg(**BIG)
    retriever = FakeRetriever()
    run_workflow("hierarchy", make_questions(40), EngineLike(varied, max_rows=4), retriever, cfg, n_traj=4, seed=3)
    sizes = [len(call) for call in retriever.calls]
    assert max(sizes) >= 8 and sum(sizes) > 2 * len(sizes)  # batched across teams


def test_batches_are_handed_back_as_they_finish():
    cfg = workflow_cfg(**BIG)
    batches = [(make_questions(2, f"d{i}"), 100 + i) for i in range(4)]
    seen = {}
    kept = run_workflows("hierarchy", batches, EngineLike(varied, max_rows=6), FakeRetriever(), cfg, n_traj=2,
                         on_rollout=lambda index, rollout: seen.setdefault(index, rollout))
    assert kept == [] and sorted(seen) == [0, 1, 2, 3]  # handed over, then let go
    assert list(seen)[0] == 0 and list(seen)[-1] == 3  # earlier teams are admitted first: they end first
    assert all(len(seen[i].trajectories) == 4 and seen[i].ticks > 0 for i in seen)
    for (questions, seed), rollout in zip(batches, [seen[i] for i in range(4)]):
        alone = run_workflow("hierarchy", questions, SeededBackend(varied), FakeRetriever(), cfg, n_traj=2, seed=seed)
        assert summary(rollout) == summary(alone)  # each batch keeps its own seed
