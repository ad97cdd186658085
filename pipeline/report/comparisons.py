"""The paper's comparisons, measured at this run's scale, each beside its published value with
one sentence on whether this scale reproduces it.

Gaps are paired-bootstrap intervals of the macro avg@k difference (pipeline.eval.bootstrap);
the search collapse and the Searcher's distance to the Teacher are read from the training
curves (dev no-search share, dev KL to the Stage-I Teacher on fixed Searcher contexts).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import pandas as pd

from pipeline.eval.bootstrap import paired_bootstrap_many
from pipeline.eval.records import per_question_scores
from pipeline.report import published as pub
from pipeline.report.curves import Curve
from pipeline.systems import BY_NAME

# (target, baseline, what the paper claims about it)
PAIRS: tuple[tuple[str, str, str], ...] = (
    ("c_mas_rl", "c_mas_base", "Stage I: outcome RL in the cascade beats the untrained cascade"),
    ("multiagent_opd", "h_mas_base", "training the hierarchy with OPD beats the untrained hierarchy"),
    ("multiagent_opd", "prompted_critic", "OPD beats a prompted judge as the Searcher's signal"),
    ("multiagent_opd", "c_mas_rl", "the hierarchy trained with OPD beats its own Teacher"),
    ("multiagent_opd", "ablation_outcome_rl_searcher", "OPD beats outcome RL for the Searcher"),
    ("multiagent_opd", "ablation_base_teacher", "a trained Teacher matters"),
    ("multiagent_opd", "ablation_no_searcher_supervision", "supervising the Searcher matters"),
)


@dataclass(frozen=True)
class Gap:
    target: str
    baseline: str
    claim: str
    diff: float | None  # ours, None when a system lacks records
    low: float | None
    high: float | None
    published: tuple[float, float | None, float | None]  # diff, low, high (interval when published)

    @property
    def verdict(self) -> str:
        return gap_verdict(self.diff, self.low, self.high, self.published[0])


def _label(system: str) -> str:
    return BY_NAME[system].label


def published_gap(target: str, baseline: str) -> tuple[float, float | None, float | None]:
    """The paper's paired interval where it gives one, else the difference of its macro avg@4."""
    if target == "multiagent_opd" and baseline in pub.GAPS:
        return pub.GAPS[baseline]
    return (round(BY_NAME[target].published_avg4 - BY_NAME[baseline].published_avg4, 2), None, None)


def gap_verdict(diff: float | None, low: float | None, high: float | None, published: float) -> str:
    """One sentence: does this run's interval reproduce the published direction?"""
    if diff is None:
        return "Not measured: a system of the pair has no evaluation records."
    direction = "positive" if published > 0 else "negative"
    if (low > 0 and published > 0) or (high < 0 and published < 0):
        return f"Reproduced at this scale: the interval excludes 0 on the published ({direction}) side."
    if low > 0 or high < 0:
        return "Reversed at this scale: the interval excludes 0 on the side opposite to the paper's."
    return "Not resolved at this scale: the interval includes 0, so the run can neither confirm nor refute it."


def measure_gaps(records: pd.DataFrame, present: list[str], runs: int, draws: int, seed: int,
                 level: float) -> list[Gap]:
    out = []
    for target, baseline, claim in PAIRS:
        diff = low = high = None
        if target in present and baseline in present:
            subset = records[records["system"].isin([target, baseline])]
            row = paired_bootstrap_many(per_question_scores(subset, runs=runs), target, [baseline], draws=draws,
                                        seed=seed, level=level).iloc[0]
            diff, low, high = float(row["diff"]), float(row["low"]), float(row["high"])
        out.append(Gap(target, baseline, claim, diff, low, high, published_gap(target, baseline)))
    return out


def format_published(published: tuple[float, float | None, float | None]) -> str:
    diff, low, high = published
    return f"{diff:+.2f} [{low:.2f}, {high:.2f}]" if low is not None else f"{diff:+.2f} (difference of macro avg@4)"


def gaps_table(gaps: list[Gap], level: int) -> tuple[list[str], list[list[str]]]:
    headers = ["comparison", "the paper's claim", f"ours: diff [{level}% interval]", pub.LABEL, "at this scale"]
    rows = []
    for g in gaps:
        ours = f"{g.diff:+.2f} [{g.low:.2f}, {g.high:.2f}]" if g.diff is not None else "not evaluated"
        rows.append([f"{_label(g.target)} - {_label(g.baseline)}", g.claim, ours, format_published(g.published),
                     g.verdict])
    return headers, rows


def _ends(curve: Curve | None, key: str) -> tuple[tuple[int, float], tuple[int, float]] | None:
    if curve is None:
        return None
    points = curve.points(key)
    if points.empty:
        return None
    first, last = points.iloc[0], points.iloc[-1]
    return (int(first["step"]), float(first[key])), (int(last["step"]), float(last[key]))


def search_collapse(curves: Mapping[str, Curve], behaviour_no_search: float | None) -> str:
    """The outcome-RL Searcher ablation's no-search share over training and at evaluation."""
    ends = _ends(curves.get("ablation_outcome_rl_searcher"), "dev_no_search_share")
    published = (f"{pub.LABEL}: on dev the no-search share rose from 0.5% to 100% between steps 300 and 400, "
                 f"and {pub.OUTCOME_RL_BEHAVIOUR['no_search_share']:.0f}% of the 20,000 test workflows made no search.")
    if ends is None:
        return f"No training curve of the outcome-RL Searcher ablation was found. {published}"
    (s0, v0), (s1, v1) = ends
    test = (f"; at evaluation {behaviour_no_search:.1f}% of its workflows made no search"
            if behaviour_no_search is not None else "")
    if v1 >= 0.9:
        verdict = "The collapse is reproduced at this scale."
    elif v1 - v0 >= 0.2:
        verdict = "The no-search share rose, but the Searcher did not stop searching: a partial collapse at this scale."
    else:
        verdict = "No search collapse at this scale: the Searcher kept searching."
    return (f"Outcome-RL Searcher ablation, dev no-search share: {100 * v0:.1f}% at step {s0}, "
            f"{100 * v1:.1f}% at step {s1}{test}. {published} {verdict}")


def searcher_kl_ends(curves: Mapping[str, Curve]) -> dict[str, tuple[tuple[int, float], tuple[int, float]]]:
    """{system: ((first step, KL), (last step, KL))} of each system with a dev Searcher KL curve."""
    return {system: found for system, curve in curves.items() if (found := _ends(curve, "dev_searcher_kl"))}


def searcher_kl(curves: Mapping[str, Curve]) -> tuple[tuple[list[str], list[list[str]]], str]:
    """Each Stage-II system's dev KL to the Stage-I Teacher, first and last point, and one sentence
    comparing MultiAgent-OPD with the no-supervision ablation."""
    ends = searcher_kl_ends(curves)
    rows = [[_label(system), f"{v0:.4f} (step {s0})", f"{v1:.4f} (step {s1})", f"{v1 - v0:+.4f}"]
            for system, ((s0, v0), (s1, v1)) in ends.items()]
    table = (["system", "dev KL to the Teacher, first", "last", "change"], rows)
    opd, nosup = ends.get("multiagent_opd"), ends.get("ablation_no_searcher_supervision")
    if opd is None or nosup is None:
        return table, "The OPD team or the no-supervision ablation has no dev KL curve."
    fell = opd[1][1] < opd[0][1]
    below = opd[1][1] < nosup[1][1]
    sentence = (f"MultiAgent-OPD's Searcher KL to the Teacher {'fell' if fell else 'did not fall'} over training "
                f"({opd[0][1]:.4f} to {opd[1][1]:.4f}) and ended {'below' if below else 'above'} the no-supervision "
                f"ablation's ({nosup[1][1]:.4f}): "
                + ("the OPD signal pulls the Searcher toward the Teacher at this scale." if fell and below else
                   "this scale does not show the OPD signal pulling the Searcher toward the Teacher."))
    return table, sentence
