"""Every computed number of the report, from the evaluation records (pipeline.eval only)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from pipeline.eval.bootstrap import paired_bootstrap_many, perfect_repair_gaps
from pipeline.eval.metrics import behaviour, macro_metrics, per_dataset_metrics, workload
from pipeline.eval.records import per_question_scores


@dataclass
class Results:
    present: list[str]
    missing: list[str]
    target: str
    runs: int
    per_dataset: pd.DataFrame  # system, dataset, n_questions, avg@k, pass@k, all@k
    macro: pd.DataFrame  # system, n_datasets, avg@k, pass@k, all@k
    flexible_macro: pd.DataFrame  # the same with flexible extraction (diagnostic)
    workload: pd.DataFrame
    behaviour: pd.DataFrame
    gaps: pd.DataFrame  # baseline, target, diff, low, high
    repair: pd.DataFrame  # perfect-repair bounds, same columns
    notes: list[str] = field(default_factory=list)

    def value(self, table: str, system: str, column: str) -> float | None:
        frame = getattr(self, table)
        row = frame[frame["system"] == system]
        return None if row.empty else float(row[column].iloc[0])


_GAP_COLUMNS = ["baseline", "target", "diff", "low", "high"]


def _comparable(records: pd.DataFrame, target: str, others: list[str]) -> tuple[list[str], list[str]]:
    """Baselines evaluated on exactly the target's (dataset, question_id) set, and the rest."""
    keys = records[["system", "dataset", "question_id"]].drop_duplicates()
    sets = {s: set(zip(g["dataset"], g["question_id"])) for s, g in keys.groupby("system")}
    same = [s for s in others if sets[s] == sets[target]]
    return same, [s for s in others if s not in same]


def compute_results(records: pd.DataFrame, present: list[str], missing: list[str], target: str,
                    runs: int, draws: int, seed: int, level: float) -> Results:
    """Metrics of every present system and the paired gaps of `target` against the others."""
    notes: list[str] = []
    empty = pd.DataFrame(columns=_GAP_COLUMNS)
    if not present:
        blank = pd.DataFrame(columns=["system"])
        return Results(present, missing, target, runs, blank, blank, blank, blank, blank, empty, empty,
                       ["No system has evaluation records yet."])
    per_dataset = per_dataset_metrics(records, "strict_correct", runs=runs)
    macro = macro_metrics(records, "strict_correct", runs=runs)
    flexible = macro_metrics(records, "flexible_correct", runs=runs)
    gaps = repair = empty
    others = [s for s in present if s != target]
    if target not in present:
        notes.append(f"Paired gaps and perfect-repair bounds are omitted: the target system "
                     f"{target!r} has no evaluation records.")
    elif not others:
        notes.append("Paired gaps are omitted: no baseline system has evaluation records.")
    else:
        baselines, skipped = _comparable(records, target, others)
        if skipped:
            notes.append(f"Gaps against {', '.join(skipped)} are omitted: evaluated on other questions "
                         f"than {target}.")
        if baselines:
            subset = records[records["system"].isin([target, *baselines])]
            scores = per_question_scores(subset, "strict_correct", runs=runs)
            gaps = paired_bootstrap_many(scores, target, baselines, draws=draws, seed=seed, level=level)
            repair = perfect_repair_gaps(subset, target, baselines, "strict_correct", runs=runs, draws=draws,
                                         seed=seed, level=level)
    if missing:
        notes.append(f"No evaluation records (data/eval/<system>/records.parquet) for: {', '.join(missing)}; "
                     f"their rows are marked 'not evaluated' and gaps needing them are omitted.")
    return Results(present, missing, target, runs, per_dataset, macro, flexible,
                   workload(records), behaviour(records, runs=runs), gaps, repair, notes)
