"""The funnel of evaluation records summed up: where each system loses its points, each role's
figures, and paired bootstrap intervals of per-call rates (docs/design.md#where-the-points-go).

A record's steps (`funnel_steps`): for a chain or single-hop question, whether the gold answer was
retrieved, reported, handed to the Answerer, and answered correctly; for a comparison, whether
every hop's answer was retrieved, reported and handed (both compared values are needed), then
correct. A wrong workflow is lost at its first step that failed; a correct one counts as correct
whichever way it got there (a guess, or an answer named in the question).

Rates are ratios of sums over records (`RATES`): the Searcher's fidelity (calls that kept a hop
answer they read / calls that read one), searches per Searcher call, the Answerer's accuracy on
the answers it was handed. Their paired intervals resample questions within each dataset with
exactly the draws of the macro EM gaps (pipeline.eval.bootstrap.dataset_draws, same seed), and
pool the ratio over all resampled questions (a per-call rate, not a macro mean over datasets).
Records written before the funnel existed lack its columns: every function then says so
(`has_funnel`) instead of failing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from pipeline.errors import InputError
from pipeline.eval.bootstrap import dataset_draws
from pipeline.eval.records import require_columns

CATEGORIES = ("single-hop", "2-hop", "3-hop", "comparison")
ALL = "all"
STEPS = ("retrieved", "reported", "handed", "correct")
# the step at which a wrong workflow lost its point, in funnel order
LOST = ("retrieval", "report", "hand-off", "Answerer")
NEEDED = ("answer_retrieved", "answer_reported", "handed", "searcher_calls", "searcher_calls_read",
          "searcher_calls_kept", "leader_waves")


def has_funnel(records: pd.DataFrame) -> bool:
    """Whether `records` carry the funnel columns (evaluations since the funnel was added)."""
    return all(c in records.columns for c in NEEDED)


def category_of(family: object, n_hops: object) -> str | None:
    """single-hop, 2-hop, 3-hop (chains) or comparison; None without hops (real data)."""
    if family is None or n_hops is None or pd.isna(n_hops) or pd.isna(family):
        return None
    if family == "comparison":
        return "comparison"
    n = int(n_hops)
    return "single-hop" if n == 1 else f"{n}-hop"


def _all_true(values: object, fallback: bool) -> bool:
    if values is None or (isinstance(values, float) and np.isnan(values)):
        return fallback
    return bool(len(values)) and all(bool(v) for v in values)


def funnel_steps(records: pd.DataFrame, correct_col: str = "strict_correct") -> pd.DataFrame:
    """Per record: system, dataset, question_id, category (None without hops), the four steps
    (bool) and `lost` (the first failed step of a wrong workflow; None when correct)."""
    require_columns(records, ["system", "dataset", "question_id", correct_col, *NEEDED])
    family = records["family"] if "family" in records else pd.Series([None] * len(records), index=records.index)
    n_hops = records["n_hops"] if "n_hops" in records else pd.Series([None] * len(records), index=records.index)
    categories = [category_of(f, n) for f, n in zip(family, n_hops)]
    comparison = np.array([c == "comparison" for c in categories])
    frame = pd.DataFrame({"system": records["system"].to_numpy(), "dataset": records["dataset"].to_numpy(),
                          "question_id": records["question_id"].to_numpy(), "category": categories})
    for step, answer_col, hop_col in (("retrieved", "answer_retrieved", "hop_retrieved"),
                                      ("reported", "answer_reported", "hop_reported"),
                                      ("handed", "handed", "hop_handed")):
        answer_level = records[answer_col].astype(bool).to_numpy()
        if comparison.any():
            hops = records[hop_col] if hop_col in records else [None] * len(records)
            hop_level = np.array([_all_true(v, False) for v in hops])
            frame[step] = np.where(comparison, hop_level, answer_level)
        else:
            frame[step] = answer_level
    frame["correct"] = records[correct_col].astype(bool).to_numpy()
    lost = np.full(len(frame), None, dtype=object)
    open_ = ~frame["correct"].to_numpy()  # wrong, and not yet placed
    for step, name in zip(STEPS[:-1], LOST[:-1]):
        here = open_ & ~frame[step].to_numpy()
        lost[here] = name
        open_ &= ~here
    lost[open_] = LOST[-1]
    frame["lost"] = lost
    return frame


def funnel_table(records: pd.DataFrame, systems: Sequence[str]) -> pd.DataFrame:
    """Per system and category (and ALL): workflows, the share of workflows at each step, and the
    share lost at each step, all in percent of the category's workflows; the lost shares and
    `correct` add up to 100."""
    steps = funnel_steps(records)
    rows = []
    for system in systems:
        mine = steps[steps["system"] == system]
        for category in (*CATEGORIES, ALL):
            part = mine if category == ALL else mine[mine["category"] == category]
            if part.empty:
                continue
            row = {"system": system, "category": category, "workflows": len(part)}
            row.update({step: 100.0 * part[step].mean() for step in STEPS})
            row.update({f"lost at {name}": 100.0 * (part["lost"] == name).mean() for name in LOST})
            rows.append(row)
    return pd.DataFrame(rows)


@dataclass(frozen=True)
class Rate:
    key: str  # the metric key (MLflow, metrics files, draw records)
    title: str
    percent: bool  # a share (x 100) or a count per unit

    def parts(self, records: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
        """(numerator, denominator) per record."""
        if self.key == "searcher_fidelity":
            return records["searcher_calls_kept"].to_numpy(float), records["searcher_calls_read"].to_numpy(float)
        if self.key == "searches_per_searcher_call":
            return records["search_actions"].to_numpy(float), records["searcher_calls"].to_numpy(float)
        if self.key == "answerer_accuracy_given_handed":
            handed = records["handed"].astype(bool).to_numpy()
            return (handed & records["strict_correct"].astype(bool).to_numpy()).astype(float), handed.astype(float)
        raise KeyError(self.key)

    def scale(self) -> float:
        return 100.0 if self.percent else 1.0


RATES = (
    Rate("searcher_fidelity", "Searcher fidelity (calls that kept a hop answer they read, %)", True),
    Rate("searches_per_searcher_call", "searches per Searcher call", False),
    Rate("answerer_accuracy_given_handed", "Answerer accuracy on answers it was handed (%)", True),
)
BY_KEY = {r.key: r for r in RATES}


def rate_value(records: pd.DataFrame, rate: Rate) -> float | None:
    num, den = rate.parts(records)
    return float(num.sum() / den.sum() * rate.scale()) if den.sum() > 0 else None


def role_table(records: pd.DataFrame, systems: Sequence[str]) -> pd.DataFrame:
    """Per system: the RATES, Searcher calls per workflow, Leader waves per workflow (hierarchy
    workflows only) and the share of chain questions of two or more hops whose later wave named an
    earlier hop's answer (`bridge_share`, hierarchy only)."""
    rows = []
    for system in systems:
        mine = records[records["system"] == system]
        if mine.empty:
            continue
        row = {"system": system, **{r.key: rate_value(mine, r) for r in RATES},
               "searcher_calls_per_workflow": float(mine["searcher_calls"].mean())}
        hierarchy = mine[mine["workflow"] == "hierarchy"] if "workflow" in mine else mine.iloc[:0]
        row["leader_waves_per_workflow"] = float(hierarchy["leader_waves"].mean()) if len(hierarchy) else None
        bridges = mine["bridge_used"].dropna() if "bridge_used" in mine else pd.Series([], dtype=bool)
        row["bridge_share"] = 100.0 * float(bridges.astype(bool).mean()) if len(bridges) else None
        rows.append(row)
    return pd.DataFrame(rows)


def _question_sums(records: pd.DataFrame, rate: Rate, systems: Sequence[str]
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(numerators, denominators) as (systems x questions) sums over each question's runs, the
    questions sorted by dataset then question_id as pipeline.eval.bootstrap.score_matrix sorts
    them, and the number of questions of each dataset."""
    num, den = rate.parts(records)
    frame = pd.DataFrame({"system": records["system"].to_numpy(), "dataset": records["dataset"].to_numpy(),
                          "question_id": records["question_id"].to_numpy(), "num": num, "den": den})
    frame = frame[frame["system"].isin(list(systems))]
    sums = frame.groupby(["dataset", "question_id", "system"], sort=True)[["num", "den"]].sum()
    wide_num, wide_den = sums["num"].unstack("system"), sums["den"].unstack("system")
    for system in systems:
        if system not in wide_num.columns:
            raise InputError(f"evaluation records: no rows for system {system!r} (column 'system')")
    if wide_num[list(systems)].isna().to_numpy().any():
        raise InputError("evaluation records: the systems compared were not evaluated on the same questions")
    sizes = wide_num.groupby(level="dataset", sort=True).size().to_numpy()
    return wide_num[list(systems)].to_numpy().T, wide_den[list(systems)].to_numpy().T, sizes


def paired_rate_gap(records: pd.DataFrame, target: str, baseline: str, rate: Rate, *, draws: int, seed: int,
                    level: float) -> dict[str, float] | None:
    """Rate of `target` - rate of `baseline` pooled over all questions, with its paired bootstrap
    interval: {diff, low, high} in the rate's unit (points for a share); None when either system
    has no denominator (say, no Searcher ever read a hop answer). A draw whose denominator is 0
    for a system is left out of the percentiles."""
    num, den, sizes = _question_sums(records, rate, [target, baseline])
    if (den.sum(axis=1) == 0).any():
        return None
    observed = num.sum(axis=1) / den.sum(axis=1) * rate.scale()
    total_num, total_den = np.zeros((draws, 2)), np.zeros((draws, 2))
    start = 0
    for n, indices in zip(sizes, dataset_draws(sizes, draws, seed)):
        n = int(n)
        counts = np.stack([np.bincount(row, minlength=n) for row in indices]).astype(float)
        total_num += counts @ num[:, start:start + n].T
        total_den += counts @ den[:, start:start + n].T
        start += n
    valid = (total_den > 0).all(axis=1)
    diffs = (total_num[valid] / total_den[valid] * rate.scale()) @ np.array([1.0, -1.0])
    tail = (1.0 - level) / 2.0 * 100.0
    low, high = np.percentile(diffs, [tail, 100.0 - tail])
    return {"diff": float(observed[0] - observed[1]), "low": float(low), "high": float(high)}


def _key(text: str) -> str:
    return text.replace("-", "_").replace(" ", "_").lower()


def funnel_metrics(records: pd.DataFrame) -> dict[str, float]:
    """Flat metrics of one system's records: each RATE, `searcher_calls_per_workflow`,
    `leader_waves_per_workflow`, `bridge_share`, and per category and step
    `funnel_<category>_<step>` (percent of the category's workflows; `all` over every record).
    Empty for records without the funnel's columns; None values are left out."""
    if not has_funnel(records) or records.empty:
        return {}
    systems = list(dict.fromkeys(records["system"]))
    if len(systems) != 1:
        raise InputError(f"funnel metrics: expected the records of one system, got {systems}")
    out = {k: float(v) for k, v in role_table(records, systems).iloc[0].items() if k != "system" and v is not None
           and not pd.isna(v)}
    for row in funnel_table(records, systems).itertuples(index=False):
        row = row._asdict()
        for step in STEPS:
            out[f"funnel_{_key(row['category'])}_{step}"] = float(row[step])
    return out
