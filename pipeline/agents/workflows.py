"""The two team workflows (docs/method.md §3), run over many questions at once.

Cascade (C-MAS): one Searcher, task = the question, then the Answerer.
Hierarchy (H-MAS): Leader -> wave of <= max_parallel Searchers -> Leader -> ... -> Answerer.

An environment step of a trajectory is one tick in which each of its active agents acts once
(Answerer candidates are the prompt repeated n_candidates times). Trajectories keep their own
step counts and advance independently (pipeline.agents.driver): with the in-process engine
every request of every trajectory goes to one continuous-batching scheduler; with any other
backend each tick is ONE `backend.generate` call holding every request of every trajectory,
with one SamplingParams (stop = every closing action tag), and at most ONE `retriever.search`
call holding every search of the tick.

Rules docs/method.md leaves open (our choices):
- Steps are 0-based. The budget (cascade_steps, hierarchy_steps) counts Leader and
  Searcher steps; the Answerer's step is always granted after it, so a forced answer
  is possible. `Trajectory.steps` counts the Answerer's step too.
- A Searcher may take at most `max_searcher_turns` turns. A `<search>` on the last
  budget step or on its last turn is counted (n_search, C_tool) but not retrieved: the
  Searcher is cut with an empty report (`cut`), since it could never read the result.
- A Searcher that writes a malformed action stops with an empty report; in the
  hierarchy its wave goes on normally.
- `forced_answer` is True when the Answerer is called without a well-formed hand-off:
  cascade: the Searcher did not end with `<report>` (malformed or cut); hierarchy: no
  well-formed `<answer_with>` (malformed Leader, step budget spent, or `max_waves`
  waves done: after the last allowed wave the Leader is not called again). A forced
  Answerer sees all reports so far, empty ones included.
- A Leader `<dispatch>` on the last budget step counts as a wave but its Searchers never
  run (no samples); the Answerer is forced.
- `<answer_with></answer_with>` (no ids) is well-formed: the Answerer gets "(none)".
  Repeated ids are handed over once.
- Report ids R1, R2, ... number the Searchers in dispatch order across waves.
- `max_new_tokens` differs per role: the engine stops each request at its own role's
  limit; a tick of another backend has one SamplingParams, asks for the largest limit among
  its requests and cuts each generation to its role's limit (finish_reason "length");
  sampling is autoregressive, so both are the same as asking for the smaller limit.
- Each request carries its own seed, key_seed(seed, sample id, turn), so a request's
  random numbers do not depend on the tick, the batch or the system: two systems run with
  the same seed draw the same numbers for the same request of the same trajectory (common
  random numbers).
- There is one Answerer request per trajectory ("{trajectory_id}/a0"); it is final.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from pipeline.agents.driver import Driver, Sink, make_sink
from pipeline.agents.prompts import Prompts, load_prompts
from pipeline.agents.team import Team
from pipeline.agents.trajectory import Rollout, Trajectory
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.errors import InputError
from pipeline.policy.base import PolicyBackend
from pipeline.retrieval.base import Retriever


def _absent(value: Any) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value)) or (isinstance(value, str) and not value)


def question_hops(value: Any, where: str) -> list[dict[str, str]] | None:
    """A question's hops (the synthetic world's `hops` column: a JSON list, or the list itself) as
    [{question, answer, title}, ...]; None when the question has none (real data)."""
    if _absent(value):
        return None
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except ValueError as exc:
            raise InputError(f"{where}: field 'hops' is not a JSON list of hops: {exc}") from None
    hops = list(value) if not isinstance(value, (dict, str)) else None
    if not hops or not all(isinstance(h, Mapping) and isinstance(h.get("answer"), str) for h in hops):
        raise InputError(f"{where}: field 'hops' must be a non-empty list of objects with a string 'answer'")
    return [{k: str(v) for k, v in h.items()} for h in hops]


def question_rows(questions: Iterable[Mapping[str, Any]] | Any) -> list[dict[str, Any]]:
    """Checked question rows: question_id (or splits' `id`), question, golden_answers, dataset, and
    where the question carries them (the synthetic world), its hops and family."""
    if hasattr(questions, "to_dict"):  # a pandas DataFrame
        questions = questions.to_dict("records")
    rows: list[dict[str, Any]] = []
    seen: set[str] = set()
    for i, q in enumerate(questions):
        qid = q.get("question_id", q.get("id"))
        if qid is None or str(qid) == "":
            raise InputError(f"questions[{i}]: missing field 'question_id' (or 'id')")
        text = q.get("question")
        if not isinstance(text, str) or not text.strip():
            raise InputError(f"questions[{i}] ({qid}): field 'question' must be a non-empty string")
        golden = q.get("golden_answers")
        if golden is None or isinstance(golden, str):
            raise InputError(f"questions[{i}] ({qid}): field 'golden_answers' must be a list of strings")
        if str(qid) in seen:
            raise InputError(f"questions[{i}]: duplicate question_id {qid!r}")
        seen.add(str(qid))
        rows.append(
            {
                "question_id": str(qid),
                "question": text,
                "golden_answers": [str(g) for g in golden],
                "dataset": str(q.get("dataset", "") or ""),
                "hops": question_hops(q.get("hops"), f"questions[{i}] ({qid})"),
                "family": "" if _absent(q.get("family")) else str(q.get("family")),
            }
        )
    return rows


def make_teams(workflow: str, questions: Iterable[Mapping[str, Any]] | Any, backend: PolicyBackend,
               cfg: WorkflowConfig, n_traj: int, seed: int, prompts: Prompts) -> list[Team]:
    """`n_traj` teams per question (trajectory k of question q is "{q}/t{k}"), sampling with `seed`."""
    if workflow not in ("cascade", "hierarchy"):
        raise InputError(f"workflow: expected 'cascade' or 'hierarchy', got {workflow!r}")
    if n_traj < 1:
        raise InputError(f"n_traj: expected an integer >= 1, got {n_traj!r}")
    return [
        Team(
            Trajectory(
                trajectory_id=f"{row['question_id']}/t{k}", question_id=row["question_id"],
                workflow=workflow, dataset=row["dataset"], question=row["question"],
                golden_answers=row["golden_answers"], hops=row["hops"], family=row["family"],
            ),
            cfg, prompts, backend, seed,
        )
        for row in question_rows(questions)
        for k in range(n_traj)
    ]


def run_workflows(
    workflow: str,
    batches: Sequence[tuple[Iterable[Mapping[str, Any]] | Any, int]],
    backend: PolicyBackend,
    retriever: Retriever,
    cfg: WorkflowConfig,
    n_traj: int,
    prompts: Prompts | None = None,
    on_rollout: Callable[[int, Rollout], None] | None = None,
) -> list[Rollout]:
    """One rollout per (questions, seed) of `batches`, all driven together: every team of every
    batch shares one scheduler (pipeline.agents.driver). A rollout's `generate_calls` and
    `search_calls` count the whole drive's.

    Without `on_rollout`, returns the rollouts. With it, `on_rollout(index, rollout)` is called as
    soon as every team of batch `index` has finished, and the rollout is then let go, so a long
    evaluation holds the trajectories in flight, not all of them; the returned list is empty."""
    prompts = prompts or load_prompts()
    teams: list[Team] = []
    rollouts: list[Rollout | None] = []
    owner: dict[int, int] = {}
    left: list[int] = []
    batch: list[Team] = []
    for index, (questions, seed) in enumerate(batches):
        batch = make_teams(workflow, questions, backend, cfg, n_traj, seed, prompts)
        rollouts.append(Rollout(workflow, cfg, seed, prompts.version, [t.traj for t in batch]))
        owner.update({id(t): index for t in batch})
        left.append(len(batch))
        teams.extend(batch)
    sink = make_sink(backend, cfg)
    driver: Driver

    def done(team: Team) -> None:
        index = owner.pop(id(team))
        left[index] -= 1
        if left[index] == 0:
            _count(rollouts[index], sink, driver)
            if on_rollout is not None:
                on_rollout(index, rollouts[index])
                rollouts[index] = None

    driver = Driver(sink, retriever, cfg, backend, on_done=done)
    driver.start(teams)
    del teams, batch  # the finished teams go with their rollouts
    driver.drive()
    if on_rollout is not None:
        return []
    for rollout in rollouts:
        _count(rollout, sink, driver)
    return rollouts


def _count(rollout: Rollout, sink: Sink, driver: Driver) -> None:
    rollout.ticks = max((t.steps for t in rollout.trajectories), default=0)
    rollout.generate_calls, rollout.search_calls = sink.generate_calls, driver.search_calls


def run_workflow(
    workflow: str,
    questions: Iterable[Mapping[str, Any]] | Any,
    backend: PolicyBackend,
    retriever: Retriever,
    cfg: WorkflowConfig,
    n_traj: int,
    seed: int,
    prompts: Prompts | None = None,
) -> Rollout:
    """Run `n_traj` independent team rollouts of `workflow` on every question."""
    return run_workflows(workflow, [(questions, seed)], backend, retriever, cfg, n_traj, prompts)[0]


def run_cascade(
    questions: Iterable[Mapping[str, Any]] | Any,
    backend: PolicyBackend,
    retriever: Retriever,
    cfg: WorkflowConfig,
    n_traj: int,
    seed: int,
    prompts: Prompts | None = None,
) -> Rollout:
    """C-MAS: Searcher (task = question) then Answerer; `cfg.cascade_steps` steps."""
    return run_workflow("cascade", questions, backend, retriever, cfg, n_traj, seed, prompts)


def run_hierarchy(
    questions: Iterable[Mapping[str, Any]] | Any,
    backend: PolicyBackend,
    retriever: Retriever,
    cfg: WorkflowConfig,
    n_traj: int,
    seed: int,
    prompts: Prompts | None = None,
) -> Rollout:
    """H-MAS: Leader waves of parallel Searchers, then Answerer; `cfg.hierarchy_steps` steps."""
    return run_workflow("hierarchy", questions, backend, retriever, cfg, n_traj, seed, prompts)
