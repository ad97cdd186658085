"""Bootstrap intervals of each system's own macro avg@k, pass@k and all@k.

The same resampling as the paired gaps (pipeline.eval.bootstrap: questions drawn with
replacement within each dataset, seeded draws), applied to one system's per-question
scores: the fraction of runs right (avg), right at least once (pass), right every run (all).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.eval.bootstrap import bootstrap_macro, observed_macro, score_matrix
from pipeline.eval.records import per_question_scores

_SCORES = {"avg": "score", "pass": "any_correct", "all": "all_correct"}
COLUMNS = ["system", "measure", "value", "low", "high", "questions", "datasets"]


def macro_intervals(records: pd.DataFrame, systems: list[str], *, runs: int, draws: int, seed: int,
                    level: float) -> pd.DataFrame:
    """One row per (system, measure): the macro value, its interval (percent), the number
    of test questions and datasets behind it. Measures are `avg@k`, `pass@k`, `all@k`.
    Systems evaluated on the same questions share one set of draws (one matrix product)."""
    if not systems:
        return pd.DataFrame(columns=COLUMNS)
    scores = per_question_scores(records[records["system"].isin(systems)], "strict_correct", runs=runs)
    question_sets: dict[frozenset, list[str]] = {}
    for system in systems:
        own = scores[scores["system"] == system]
        question_sets.setdefault(frozenset(zip(own["dataset"], own["question_id"])), []).append(system)
    tail = (1.0 - level) / 2.0 * 100.0
    found: dict[tuple[str, str], dict] = {}
    for group in question_sets.values():
        own = scores[scores["system"].isin(group)]
        rows = [own[["dataset", "question_id"]].assign(system=own["system"] + "|" + measure,
                                                       score=own[column].astype(float))
                for measure, column in _SCORES.items()]
        keys = [f"{s}|{m}" for s in group for m in _SCORES]
        matrix, sizes = score_matrix(pd.concat(rows, ignore_index=True), keys)
        observed = observed_macro(matrix, sizes)
        low, high = np.percentile(bootstrap_macro(matrix, sizes, draws, seed), [tail, 100.0 - tail], axis=0)
        for i, key in enumerate(keys):
            system, measure = key.split("|")
            found[(system, measure)] = {
                "system": system, "measure": f"{measure}@{runs}", "value": float(observed[i]),
                "low": float(low[i]), "high": float(high[i]), "questions": int(sizes.sum()), "datasets": len(sizes)}
    return pd.DataFrame([found[(s, m)] for s in systems for m in _SCORES], columns=COLUMNS)
