"""Facts read: the Searcher calls that read the passage *stating* a hop's fact, and what they reported.

The funnel's string test (pipeline.eval.funnel: some passage a Searcher read holds the answer as
whole words) is the answer-level measure, defined on real data too. On the synthetic world it also
counts a coincidental mention (a namesake's passage, another entity's spouse line) as a read. This
module measures the fact itself: a hop's *stating passage* is a passage titled by the hop's subject
(`hops[i].title`) whose text holds the hop's answer. A Searcher call *stated-read* a hop when one of
its passages states it and its own task does not name the answer (a bridge passed on is not news,
as in the funnel), and *kept* it when its report holds that answer. Targets are the funnel's: each
hop's answer, the last hop of a chain with every gold alias.

A *miss* (a call that stated-read a hop and whose report holds none of the hops it stated-read) is
classified by the report's closest sentence among the passages the call read (difflib's ratio over
normalised words, the best pair of a report sentence and a passage sentence):
- `copied_wrong`: the closest is a sentence of the stating passage that holds the answer (the right
  sentence, copied with another name, month or day);
- `other_verbatim`: another sentence, copied exactly (asked for a spouse, it reports the birthplace);
- `other_copied_wrong`: another sentence, not copied exactly;
- `empty`: no report.

Computed from what the evaluation records keep (each Searcher call's task, report and passage ids),
the questions' hops and the index's passages; None for every column on questions without hops
(real data). docs/design.md#facts-read says which figure answers which question.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher
from typing import Any

import numpy as np
import pandas as pd

from pipeline.agents.workflows import question_hops
from pipeline.data.normalize import normalize_answer
from pipeline.data.sentences import sentences
from pipeline.errors import InputError
from pipeline.eval.funnel import COMPARISON, holds, words
from pipeline.eval.funnel_metrics import Rate, category_of

MISSES = ("copied_wrong", "other_verbatim", "other_copied_wrong", "empty")
COLUMNS = ("hop_stated", "searcher_calls_stated", "searcher_calls_stated_kept", *(f"miss_{m}" for m in MISSES))
NEEDED = ("question_id", "golden_answers", "searcher_tasks", "searcher_reports", "searcher_passage_ids")


@dataclass(frozen=True)
class IndexedPassage:
    title: str  # normalised
    text: str  # `words` of the text: normalised and padded, for `holds`
    sentences: tuple[tuple[str, ...], ...]  # each sentence's normalised words


def index_passages(passages: pd.DataFrame, where: str = "passages") -> dict[str, IndexedPassage]:
    """The index's passages (columns id, title, text) by id, ready for `stated_columns`."""
    missing = [c for c in ("id", "title", "text") if c not in passages.columns]
    if missing:
        raise InputError(f"{where}: missing column(s) {missing}; expected id, title, text")
    return {str(i): IndexedPassage(normalize_answer(str(t)), words(str(x)),
                                   tuple(tuple(normalize_answer(s).split()) for s in sentences(str(x))))
            for i, t, x in zip(passages["id"], passages["title"], passages["text"])}


def hops_by_question(questions: pd.DataFrame, where: str) -> dict[str, list[dict[str, str]] | None]:
    """question id -> its hops (None without), from a split's `id` (or `question_id`) and `hops` columns."""
    ids = questions["id"] if "id" in questions else questions["question_id"]
    if "hops" not in questions:
        return {str(i): None for i in ids}
    return {str(i): question_hops(h, f"{where}, question {i}") for i, h in zip(ids, questions["hops"])}


def targets_of(hops: Sequence[Mapping[str, str]], family: str | None, golden: Sequence[str]) -> list[list[str]]:
    """The funnel's targets (pipeline.eval.funnel.hop_targets): each hop's answer, the last hop of a
    chain with every gold alias."""
    targets = [[hop["answer"]] for hop in hops]
    if family != COMPARISON:
        targets[-1] = list(dict.fromkeys([*targets[-1], *golden]))
    return targets


def _stating(passage: IndexedPassage, hop: Mapping[str, str], aliases: Sequence[str]) -> bool:
    return passage.title == normalize_answer(hop.get("title", "")) and holds(passage.text, aliases)


def classify_miss(report: str, read: Sequence[IndexedPassage], stating: Sequence[tuple[str, ...]]) -> str:
    """One of MISSES for a report that missed: by its closest sentence among `read`'s sentences;
    `stating`: the stating passage's sentences that hold the answer."""
    report_sentences = [tuple(normalize_answer(s).split()) for s in sentences(report)]
    report_sentences = [s for s in report_sentences if s]
    if not report_sentences:
        return "empty"
    best, best_ratio, best_report = None, -1.0, None
    for candidate in (s for p in read for s in p.sentences):
        for mine in report_sentences:
            ratio = SequenceMatcher(None, mine, candidate, autojunk=False).ratio()
            if ratio > best_ratio:
                best, best_ratio, best_report = candidate, ratio, mine
    if best is None:
        return "other_copied_wrong"
    if best in stating:
        return "copied_wrong"
    return "other_verbatim" if best == best_report else "other_copied_wrong"


def call_reads(task: str, report: str, read: Sequence[IndexedPassage], hops: Sequence[Mapping[str, str]],
               targets: Sequence[Sequence[str]]) -> tuple[list[int], bool, str | None]:
    """One Searcher call: (the hops it stated-read, whether it kept one, its miss class or None)."""
    task_words, report_words = words(task), words(report)
    stated = [i for i, (hop, aliases) in enumerate(zip(hops, targets))
              if not holds(task_words, aliases) and any(_stating(p, hop, aliases) for p in read)]
    if not stated:
        return [], False, None
    if any(holds(report_words, targets[i]) for i in stated):
        return stated, True, None
    first = stated[0]
    stating = [s for p in read if _stating(p, hops[first], targets[first]) for s in p.sentences
               if holds(f" {' '.join(s)} ", targets[first])]
    return stated, False, classify_miss(report, read, stating)


def record_reads(row: Mapping[str, Any], hops: Sequence[Mapping[str, str]] | None, family: str | None,
                 passages: Mapping[str, IndexedPassage]) -> dict[str, Any]:
    """The COLUMNS of one evaluation record (all None when its question has no hops)."""
    if not hops:
        return dict.fromkeys(COLUMNS)
    targets = targets_of(hops, family, list(row["golden_answers"]))
    hop_stated = [False] * len(hops)
    out = {"searcher_calls_stated": 0, "searcher_calls_stated_kept": 0, **{f"miss_{m}": 0 for m in MISSES}}
    for task, report, ids in zip(row["searcher_tasks"], row["searcher_reports"], row["searcher_passage_ids"]):
        try:
            read = [passages[str(i)] for i in ids]
        except KeyError as e:
            raise InputError(f"evaluation record {row['question_id']}: passage id {e.args[0]!r} is not in the "
                             "index's passages (records of another index?)") from None
        stated, kept, miss = call_reads(str(task), str(report), read, hops, targets)
        for i in stated:
            hop_stated[i] = True
        out["searcher_calls_stated"] += bool(stated)
        out["searcher_calls_stated_kept"] += kept
        if miss is not None:
            out[f"miss_{miss}"] += 1
    return {"hop_stated": hop_stated, **out}


def stated_columns(records: pd.DataFrame, hops: Mapping[str, list[dict[str, str]] | None],
                   passages: Mapping[str, IndexedPassage]) -> pd.DataFrame:
    """`records` (with the funnel's raw columns) plus COLUMNS; a record whose question is not in
    `hops` is an error."""
    missing = [c for c in NEEDED if c not in records.columns]
    if missing:
        raise InputError(f"evaluation records: missing column(s) {missing} (records written before the funnel?)")
    rows = []
    family = records["family"] if "family" in records else pd.Series([None] * len(records), index=records.index)
    for row, fam in zip(records[list(NEEDED)].to_dict("records"), family):
        qid = str(row["question_id"])
        if qid not in hops:
            raise InputError(f"evaluation records: question {qid!r} is not in the split the records were scored on")
        rows.append(record_reads(row, hops[qid], None if pd.isna(fam) else fam, passages))
    out = records.copy()
    for column in COLUMNS:
        values = [r[column] for r in rows]
        out[column] = pd.array(values, dtype="Int64") if column != "hop_stated" else values
    return out


class StatedRate(Rate):
    """A per-call rate over the stated-read columns (pipeline.eval.funnel_metrics.Rate's interface)."""

    def parts(self, records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        numerator, denominator = STATED_PARTS[self.key]
        return (records[numerator].fillna(0).to_numpy(float), records[denominator].fillna(0).to_numpy(float))


STATED_PARTS = {
    "searcher_fidelity_stated": ("searcher_calls_stated_kept", "searcher_calls_stated"),
    "copied_wrong_share": ("miss_copied_wrong", "searcher_calls_stated"),
}
STATED_RATES = (
    StatedRate("searcher_fidelity_stated", "Searcher fidelity on the stating passage (calls that kept a hop "
               "answer whose stating passage they read, %)", True),
    StatedRate("copied_wrong_share", "Right sentence copied wrong (% of calls that read a stating passage)", True),
)
BY_STATED_KEY = {r.key: r for r in STATED_RATES}


def has_stated(records: pd.DataFrame) -> bool:
    return all(c in records.columns for c in COLUMNS)


def reads_table(records: pd.DataFrame, systems: Sequence[str]) -> pd.DataFrame:
    """Per system and kind of question (and "all"): Searcher calls; the shares of them that read a
    target by the string test (`read`) and by its stating passage (`stated`); fidelity on the
    stating passage; each miss class in percent of the stated-read calls; and per hop, the shares
    of the `hop_count` hops some call read by the string test (`hops_retrieved`) and by the
    stating passage (`hops_stated`). Questions without hops are left out."""
    rows = []
    for system in systems:
        mine = records[(records["system"] == system) & records["searcher_calls_stated"].notna()]
        kinds = pd.Series([category_of(f, n) for f, n in zip(mine["family"], mine["n_hops"])], index=mine.index)
        for kind in ("single-hop", "2-hop", "3-hop", "comparison", "all"):
            part = mine if kind == "all" else mine[kinds == kind]
            if part.empty:
                continue
            calls = float(part["searcher_calls"].sum())
            stated = float(part["searcher_calls_stated"].sum())
            hop_retrieved = [bool(v) for vs in part["hop_retrieved"] for v in vs]
            hop_stated = [bool(v) for vs in part["hop_stated"] for v in vs]
            row = {"system": system, "category": kind, "workflows": len(part), "calls": int(calls),
                   "read": _share(part["searcher_calls_read"].sum(), calls),
                   "stated": _share(stated, calls),
                   "fidelity": _share(part["searcher_calls_kept"].sum(), part["searcher_calls_read"].sum()),
                   "fidelity_stated": _share(part["searcher_calls_stated_kept"].sum(), stated),
                   **{m: _share(part[f"miss_{m}"].sum(), stated) for m in MISSES},
                   "hop_count": len(hop_stated),
                   "hops_retrieved": _share(sum(hop_retrieved), len(hop_retrieved)),
                   "hops_stated": _share(sum(hop_stated), len(hop_stated))}
            rows.append(row)
    return pd.DataFrame(rows)


def _share(numerator: float, denominator: float) -> float | None:
    return 100.0 * float(numerator) / float(denominator) if denominator else None
