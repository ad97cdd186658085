"""Recount the report's funnel figures from the evaluation records, independently of pipeline.eval.funnel.

    .venv/bin/python scripts/recount_funnel.py [--root .] [--profile tiny]

For every system whose records have the funnel's columns, it recomputes each workflow's funnel from
the raw columns the records keep (each Searcher call's task, report and passage ids, the reports
handed to the Answerer), the test split's hops and the index's passages, with its own normalisation
and whole-word matching; checks every record's funnel columns against the recount; then recounts
the figures the report prints (reports/metrics.json: systems.<system>.funnel) and compares them.
Where the split has hops (the synthetic world), it also recounts the facts read
(pipeline.eval.stated_reads): per Searcher call, the hops whose stating passage (titled by the hop's
subject, holding its answer) it read, whether its report kept one, and the class of a miss by the
report's closest passage sentence; and the report's facts-read figures.
Prints one line per system and exits 1 on any disagreement.
"""

from __future__ import annotations

import argparse
import json
import re
import string
import sys
from collections import Counter
from difflib import SequenceMatcher
from pathlib import Path

import pandas as pd

TOLERANCE = 0.01  # metrics.json rounds to 4 decimals
_PUNCT = re.compile("[" + re.escape(string.punctuation) + "]")
_ARTICLE = re.compile(r"\b(a|an|the)\b")


def norm(text: str) -> str:
    """SQuAD's normalisation, written out again: lower case, no punctuation, no articles, single spaces."""
    return " ".join(_ARTICLE.sub(" ", _PUNCT.sub("", str(text).lower())).split())


def held(text: str, aliases) -> bool:
    padded = f" {norm(text)} "
    return any(norm(a) and f" {norm(a)} " in padded for a in aliases)


def split_sentences(text: str) -> list[tuple[str, ...]]:
    return [tuple(norm(s).split()) for s in re.split(r"(?<=\.)\s+", str(text)) if norm(s)]


def miss_class(report: str, ids, texts: dict[str, str], stating: list[tuple[str, ...]]) -> str:
    mine = split_sentences(report)
    if not mine:
        return "empty"
    scored = [(SequenceMatcher(None, r, c, autojunk=False).ratio(), -n, r, c)
              for n, (r, c) in enumerate((r, c) for c in (c for p in ids for c in split_sentences(texts[p]))
                                         for r in mine)]
    if not scored:
        return "other_copied_wrong"
    _, _, r, c = max(scored)
    return "copied_wrong" if c in stating else ("other_verbatim" if r == c else "other_copied_wrong")


def recount_stated(row, hops, family: str | None, titles: dict[str, str], texts: dict[str, str]) -> dict:
    """The facts-read columns of one record, written out again."""
    gold = list(row.golden_answers)
    targets = [[h["answer"]] for h in hops]
    if family != "comparison":
        targets[-1] = targets[-1] + gold
    hop_stated, calls, kept, misses = [False] * len(hops), 0, 0, Counter()
    for ids, report, task in zip(row.searcher_passage_ids, row.searcher_reports, row.searcher_tasks):
        ids = [str(p) for p in ids]
        stated = [i for i, h in enumerate(hops) if not held(task, targets[i]) and any(
            norm(titles[p]) == norm(h.get("title", "")) and held(texts[p], targets[i]) for p in ids)]
        for i in stated:
            hop_stated[i] = True
        calls += bool(stated)
        if stated and any(held(report, targets[i]) for i in stated):
            kept += 1
        elif stated:
            h, t = hops[stated[0]], targets[stated[0]]
            stating = [c for p in ids if norm(titles[p]) == norm(h.get("title", "")) and held(texts[p], t)
                       for c in split_sentences(texts[p]) if held(" ".join(c), t)]
            misses[miss_class(report, ids, texts, stating)] += 1
    return {"hop_stated": hop_stated, "searcher_calls_stated": calls, "searcher_calls_stated_kept": kept,
            **{f"miss_{m}": misses[m] for m in MISSES}}


MISSES = ("copied_wrong", "other_verbatim", "other_copied_wrong", "empty")


def stated_figures(frame: pd.DataFrame) -> dict[str, float | None]:
    """The report's facts-read figures of one system (metrics.json funnel keys)."""
    out = {"searcher_fidelity_stated": ratio(frame["searcher_calls_stated_kept"].sum(),
                                             frame["searcher_calls_stated"].sum(), 100),
           "copied_wrong_share": ratio(frame["miss_copied_wrong"].sum(), frame["searcher_calls_stated"].sum(), 100)}
    frame = frame[frame["kind"].notna()]
    for name, part in [("all", frame), *((k, frame[frame["kind"] == k]) for k in
                                         ("single-hop", "2-hop", "3-hop", "comparison"))]:
        if not len(part):
            continue
        calls, stated = part["searcher_calls"].sum(), part["searcher_calls_stated"].sum()
        retrieved = [bool(v) for vs in part["hop_retrieved"] for v in vs]
        read_hops = [bool(v) for vs in part["hop_stated"] for v in vs]
        out.update({f"{name}_read": ratio(part["searcher_calls_read"].sum(), calls, 100),
                    f"{name}_stated": ratio(stated, calls, 100),
                    f"{name}_fidelity_stated": ratio(part["searcher_calls_stated_kept"].sum(), stated, 100),
                    **{f"{name}_{m}": ratio(part[f"miss_{m}"].sum(), stated, 100) for m in MISSES},
                    f"{name}_hops_retrieved": ratio(sum(retrieved), len(retrieved), 100),
                    f"{name}_hops_stated": ratio(sum(read_hops), len(read_hops), 100)})
    return out


def recount_row(row, hops, family: str | None, contents: dict[str, str]) -> dict:
    gold = list(row.golden_answers)
    passages = [[contents[p] for p in ids] for ids in row.searcher_passage_ids]
    reports, tasks = list(row.searcher_reports), list(row.searcher_tasks)
    handed = [reports[i] for i in row.handed_reports]
    read_all = [p for ps in passages for p in ps]
    if hops:
        targets = [[h["answer"]] for h in hops]
        if family != "comparison":
            targets[-1] = targets[-1] + gold
    else:
        targets = [gold]
    read = kept = 0
    for ps, report, task in zip(passages, reports, tasks):
        found = [t for t in targets if any(held(p, t) for p in ps) and not held(task, t)]
        read += bool(found)
        kept += bool(found) and any(held(report, t) for t in found)
    out = {"answer_retrieved": any(held(p, gold) for p in read_all),
           "answer_reported": any(held(r, gold) for r in reports),
           "handed": any(held(r, gold) for r in handed),
           "searcher_calls": len(reports), "searcher_calls_read": read, "searcher_calls_kept": kept}
    if hops:
        out["hop_retrieved"] = [any(held(p, [h["answer"]]) for p in read_all) for h in hops]
        out["hop_reported"] = [any(held(r, [h["answer"]]) for r in reports) for h in hops]
        out["hop_handed"] = [any(held(r, [h["answer"]]) for r in handed) for h in hops]
    return out


def _shown(value: float | None) -> str:
    return "not measured" if value is None else f"{value:.2f}%"


def kind(family, hops) -> str | None:
    if not hops:
        return None
    return "comparison" if family == "comparison" else ("single-hop" if len(hops) == 1 else f"{len(hops)}-hop")


def ratio(numerator: float, denominator: float, scale: float = 1.0) -> float | None:
    """None when nothing stands behind the rate (the report prints it as not measured)."""
    return scale * numerator / denominator if denominator else None


def figures(frame: pd.DataFrame) -> dict[str, float | None]:
    """The report's figures of one system, from recounted rows."""
    out = {"searcher_fidelity": ratio(frame["searcher_calls_kept"].sum(), frame["searcher_calls_read"].sum(), 100),
           "searches_per_searcher_call": ratio(frame["search_actions"].sum(), frame["searcher_calls"].sum()),
           "answerer_accuracy_given_handed": ratio((frame["handed"] & frame["strict_correct"]).sum(),
                                                   frame["handed"].sum(), 100)}
    steps = pd.DataFrame({"kind": frame["kind"], "correct": frame["strict_correct"]})
    comparison = frame["kind"] == "comparison"
    for step, hop in (("retrieved", "hop_retrieved"), ("reported", "hop_reported"), ("handed", "hop_handed")):
        answer = frame["answer_retrieved" if step == "retrieved" else "answer_reported" if step == "reported"
                       else "handed"]
        every_hop = frame[hop].map(lambda v: v is not None and len(v) > 0 and all(v))
        steps[step] = answer.where(~comparison, every_hop)
    for name, part in [("all", steps), *((k, steps[steps["kind"] == k]) for k in
                                          ("single-hop", "2-hop", "3-hop", "comparison"))]:
        if len(part):
            for step in ("retrieved", "reported", "handed", "correct"):
                out[f"{name}_{step}"] = 100 * part[step].astype(bool).mean()
    return out


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--profile", default="tiny")
    args = parser.parse_args(argv)
    root = args.root
    test = pd.read_parquet(root / "data/splits/test.parquet")
    hops = {str(i): (json.loads(h) if isinstance(h, str) and h else None)
            for i, h in zip(test["id"], test["hops"] if "hops" in test else [None] * len(test))}
    families = dict(zip(test["id"].astype(str), test["family"] if "family" in test else [None] * len(test)))
    index = pd.read_parquet(root / "data/index/passages.parquet")
    contents = dict(zip(index["id"].astype(str), index["title"] + "\n" + index["text"]))
    ids = index["id"].astype(str)
    titles, texts = dict(zip(ids, index["title"])), dict(zip(ids, index["text"]))
    printed = json.loads((root / "reports/metrics.json").read_text())["systems"]
    failures = 0
    for folder in sorted((root / "data/eval").iterdir()):
        path = folder / "records.parquet"
        if not path.is_file():
            continue
        records = pd.read_parquet(path)
        system = str(records["system"].iloc[0])
        if "searcher_passage_ids" not in records:
            print(f"{system}: no funnel columns (records written before the funnel); skipped")
            continue
        rows, mismatched = [], 0
        for row in records.itertuples(index=False):
            qid = str(row.question_id)
            got = recount_row(row, hops.get(qid), families.get(qid), contents)
            for key, value in got.items():
                stored = getattr(row, key)
                stored = [bool(v) for v in stored] if key.startswith("hop_") else stored
                if (list(value) if isinstance(value, list) else value) != (
                        list(stored) if key.startswith("hop_") else stored):
                    mismatched += 1
                    break
            if hops.get(qid):
                got.update(recount_stated(row, hops[qid], families.get(qid), titles, texts))
            rows.append({**got, "kind": kind(families.get(qid), hops.get(qid)),
                         "strict_correct": bool(row.strict_correct), "search_actions": int(row.search_actions),
                         **{k: got.get(k) for k in ("hop_retrieved", "hop_reported", "hop_handed")}})
        frame = pd.DataFrame(rows)
        recount = figures(frame)
        if "searcher_calls_stated" in frame:
            recount.update(stated_figures(frame[frame["searcher_calls_stated"].notna()]))
        report = printed.get(system, {}).get("funnel", {})
        differ = {k: (v, report.get(k)) for k, v in recount.items()
                  if (v is None) != (report.get(k) is None) or (v is not None and abs(report[k] - v) > TOLERANCE)}
        failures += mismatched + len(differ)
        print(f"{system}: {len(records)} records, {mismatched} whose funnel columns differ from the recount; "
              f"fidelity {_shown(recount['searcher_fidelity'])} (report {_shown(report.get('searcher_fidelity'))}), "
              + (f"on the stating passage {_shown(recount['searcher_fidelity_stated'])} (report "
                 f"{_shown(report.get('searcher_fidelity_stated'))}), " if "searcher_fidelity_stated" in recount
                 else "")
              + f"{len(recount) - len(differ)} of {len(recount)} printed figures agree"
              + (f"; differ: {differ}" if differ else ""))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
