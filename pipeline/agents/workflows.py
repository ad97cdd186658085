"""The two team workflows (docs/method.md §3), run in lock-step over a whole batch.

Cascade (C-MAS): one Searcher, task = the question, then the Answerer.
Hierarchy (H-MAS): Leader -> wave of <= max_parallel Searchers -> Leader -> ... -> Answerer.

An environment step is one tick in which every active agent of every trajectory acts
once. Per tick the driver makes exactly ONE `backend.generate` call holding every
request of every trajectory (Answerer candidates are the prompt repeated n_candidates
times with n=1) with one SamplingParams (stop = every closing action tag), and at
most ONE `retriever.search` call holding every search of the tick.

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
- `max_new_tokens` differs per role but a tick has one SamplingParams: the tick asks
  for the largest limit among its requests and cuts each generation to its role's
  limit (finish_reason "length"); sampling is autoregressive, so this is the same as
  asking for the smaller limit.
- Sampling seed of tick t: (seed * 1_000_003 + t) mod 2**31; each request carries its own
  row seed, key_seed(seed, sample id, turn), so a request's random numbers do not depend on
  the tick, the batch or the system: two systems run with the same seed draw the same
  numbers for the same request of the same trajectory (common random numbers).
- There is one Answerer request per trajectory ("{trajectory_id}/a0"); it is final.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from pipeline.agents.prompts import Prompts, load_prompts
from pipeline.agents.protocol import STOP_TAGS
from pipeline.agents.team import ModelRequest, Team
from pipeline.agents.trajectory import Rollout, Trajectory
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.errors import InputError
from pipeline.policy.base import Generation, PolicyBackend, SamplingParams
from pipeline.policy.sampling_seeds import key_seed
from pipeline.retrieval.base import Retriever


def question_rows(questions: Iterable[Mapping[str, Any]] | Any) -> list[dict[str, Any]]:
    """Checked question rows: question_id (or splits' `id`), question, golden_answers, dataset."""
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
            }
        )
    return rows


def _truncate(gen: Generation, limit: int, backend: PolicyBackend) -> Generation:
    if len(gen.token_ids) <= limit:
        return gen
    ids = list(gen.token_ids[:limit])
    return Generation(ids, list(gen.logprobs[:limit]), backend.decode(ids), "length")


def _generate(
    backend: PolicyBackend, requests: Sequence[ModelRequest], cfg: WorkflowConfig, seed: int
) -> list[Generation]:
    """All requests of one tick as one generate call; each request is seeded by what it is
    (rollout seed, sample, turn), not by where it sits in the batch."""
    params = SamplingParams(
        temperature=cfg.temperature,
        top_p=cfg.top_p,
        max_new_tokens=max(r.max_new_tokens for r in requests),
        stop=STOP_TAGS,
        row_seeds=tuple(key_seed(seed, r.call.sample_id, r.call.n_turns) for r in requests),
        shared_prefixes=cfg.grouped_generation,
        row_max_new_tokens=tuple(r.max_new_tokens for r in requests) if cfg.grouped_generation else None,
    )
    out = backend.generate([r.prompt_ids for r in requests], params, n=1)
    if len(out) != len(requests) or any(len(g) != 1 for g in out):
        raise RuntimeError(f"backend returned {len(out)} results for {len(requests)} prompts (n=1 each)")
    return [_truncate(g[0], r.max_new_tokens, backend) for g, r in zip(out, requests)]


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
    """Run `n_traj` independent team rollouts of `workflow` on every question, batched by tick."""
    if workflow not in ("cascade", "hierarchy"):
        raise InputError(f"workflow: expected 'cascade' or 'hierarchy', got {workflow!r}")
    if n_traj < 1:
        raise InputError(f"n_traj: expected an integer >= 1, got {n_traj!r}")
    prompts = prompts or load_prompts()
    teams = [
        Team(
            Trajectory(
                trajectory_id=f"{row['question_id']}/t{k}", question_id=row["question_id"],
                workflow=workflow, dataset=row["dataset"], question=row["question"],
                golden_answers=row["golden_answers"],
            ),
            cfg, prompts, backend,
        )
        for row in question_rows(questions)
        for k in range(n_traj)
    ]
    rollout = Rollout(workflow, cfg, seed, prompts.version, [t.traj for t in teams])
    # Safety net only: every phase advances or ends each tick within the budget.
    max_ticks = cfg.budget(workflow) + 2
    step = 0
    while any(not t.done for t in teams):
        if step >= max_ticks:
            raise RuntimeError(f"{workflow} rollout did not finish within {max_ticks} ticks")
        active = [t for t in teams if not t.done]
        requests = [r for t in active for r in t.requests(step)]
        searches: list[tuple[ModelRequest, str]] = []
        if requests:
            rollout.generate_calls += 1
            for request, gen in zip(requests, _generate(backend, requests, cfg, seed)):
                query = request.team.receive(request, gen, step)
                if query is not None:
                    searches.append((request, query))
        if searches:
            rollout.search_calls += 1
            results = retriever.search([q for _, q in searches], cfg.top_k)
            if len(results) != len(searches):
                raise RuntimeError(f"retriever returned {len(results)} results for {len(searches)} queries")
            for (request, _), passages in zip(searches, results):
                assert request.searcher is not None
                request.searcher.observe(passages, backend)
        for team in active:
            team.end_tick(step)
        step += 1
    rollout.ticks = step
    return rollout


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
