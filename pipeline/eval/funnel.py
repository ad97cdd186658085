"""Where the points go: each workflow's funnel from the passages its Searchers read to its answer.

Computed when an evaluation shard is scored, from what each call saw and wrote (the passages a
Searcher read, its task and report, the reports handed to the Answerer), one record per
workflow (docs/contracts.md#evaluation-records, docs/design.md#where-the-points-go).

An answer is *in* a text when its SQuAD-normalised form (the EM scorer's) appears there as whole
words: FlashRAG's "answer in the retrieved documents" test, but on word boundaries, since the
synthetic world's short names would otherwise match inside other words ("Bo" in "book"). An
alias that normalises to nothing is never in a text.

Per hop of the question (the synthetic world's hops; null on real data): `hop_retrieved` (some
Searcher read its answer in a passage), `hop_reported` (some report holds it), `hop_handed` (a
report handed to the Answerer holds it). The answer level, defined everywhere: the gold answer
(any alias) `answer_retrieved`, `answer_reported`, `handed`. A Searcher call *read* a target
when one of its passages holds it and its own task does not name it (a bridge the Leader passed
on is not news), and *kept* it when its report holds a target it read: the Searcher's fidelity
is kept / read over calls. Targets: the hop answers (the last hop of a chain with every gold
alias), or the gold aliases where the question has no hops.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from functools import lru_cache
from typing import Any

from pipeline.agents.trajectory import Call, Trajectory
from pipeline.data.normalize import normalize_answer

# Columns added to every evaluation record (hop-level ones None without hops)
FUNNEL_COLUMNS = [
    "family", "n_hops", "hop_retrieved", "hop_reported", "hop_handed", "answer_retrieved", "answer_reported",
    "handed", "searcher_calls", "searcher_calls_read", "searcher_calls_kept", "leader_waves", "bridge_used",
    "searcher_tasks", "searcher_reports", "searcher_waves", "searcher_passage_ids", "handed_reports",
]
COMPARISON = "comparison"


def words(text: str) -> str:
    """`text` normalised and padded with spaces, ready for `holds`."""
    return f" {normalize_answer(text)} "


_alias = lru_cache(maxsize=1 << 16)(normalize_answer)  # an evaluation asks for the same aliases again and again


def holds(text_words: str, aliases: Iterable[str]) -> bool:
    """Whether any alias appears as whole words in `text_words` (made by `words`)."""
    for alias in aliases:
        norm = _alias(alias)
        if norm and f" {norm} " in text_words:
            return True
    return False


def hop_targets(traj: Trajectory) -> list[list[str]] | None:
    """The aliases of each hop's answer; the last hop of a chain (not a comparison) also takes
    every gold alias. None without hops."""
    if not traj.hops:
        return None
    targets = [[hop["answer"]] for hop in traj.hops]
    if traj.family != COMPARISON:
        targets[-1] = list(dict.fromkeys([*targets[-1], *traj.golden_answers]))
    return targets


def _searchers(traj: Trajectory) -> list[Call]:
    return [c for c in traj.calls if c.role == "searcher"]


def _any(texts: Sequence[str], aliases: Sequence[str]) -> bool:
    return any(holds(t, aliases) for t in texts)


def _bridge_used(traj: Trajectory, calls: Sequence[Call]) -> bool | None:
    """A task of a later wave names the answer of an earlier hop of a chain; None for questions
    without a chain of at least two hops (single-hop, comparison, unknown) or in the cascade."""
    if traj.workflow != "hierarchy" or not traj.hops or len(traj.hops) < 2 or traj.family == COMPARISON:
        return None
    earlier = [[hop["answer"]] for hop in traj.hops[:-1]]
    later_tasks = [words(c.task) for c in calls if c.wave >= 1]
    return any(_any(later_tasks, aliases) for aliases in earlier)


def trajectory_funnel(traj: Trajectory) -> dict[str, Any]:
    """The funnel columns (FUNNEL_COLUMNS) of one workflow."""
    calls = _searchers(traj)
    passages = [[words(p.contents) for p in c.passages] for c in calls]
    reports = [words(c.report) for c in calls]
    tasks = [words(c.task) for c in calls]
    handed_ids = set(traj.handed)
    handed_index = [i for i, c in enumerate(calls) if c.report_id and c.report_id in handed_ids]
    handed_texts = [reports[i] for i in handed_index]
    read_texts = [text for texts in passages for text in texts]
    hops = hop_targets(traj)
    targets = hops if hops is not None else [list(traj.golden_answers)]
    read = kept = 0
    for texts, report, task in zip(passages, reports, tasks):
        found = [aliases for aliases in targets if _any(texts, aliases) and not holds(task, aliases)]
        if found:
            read += 1
            kept += any(holds(report, aliases) for aliases in found)
    gold = list(traj.golden_answers)
    return {
        "family": traj.family or None,
        "n_hops": len(traj.hops) if traj.hops else None,
        "hop_retrieved": None if hops is None else [_any(read_texts, a) for a in hops],
        "hop_reported": None if hops is None else [_any(reports, a) for a in hops],
        "hop_handed": None if hops is None else [_any(handed_texts, a) for a in hops],
        "answer_retrieved": _any(read_texts, gold),
        "answer_reported": _any(reports, gold),
        "handed": _any(handed_texts, gold),
        "searcher_calls": len(calls),
        "searcher_calls_read": read,
        "searcher_calls_kept": kept,
        "leader_waves": traj.waves,
        "bridge_used": _bridge_used(traj, calls),
        "searcher_tasks": [c.task for c in calls],
        "searcher_reports": [c.report for c in calls],
        "searcher_waves": [c.wave for c in calls],
        "searcher_passage_ids": [[p.id for p in c.passages] for c in calls],
        "handed_reports": handed_index,
    }
