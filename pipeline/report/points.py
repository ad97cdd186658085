"""The report's "Where the points go": each system's funnel from retrieval to answer, each role's
figures, and the paired intervals of the role-level comparisons the paper's claims rest on
(pipeline.eval.funnel, pipeline.eval.funnel_metrics; docs/design.md#where-the-points-go)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from pipeline.eval.funnel_metrics import (
    CATEGORIES,
    LOST,
    RATES,
    STEPS,
    funnel_table,
    paired_rate_gap,
    rate_value,
    role_table,
)
from pipeline.eval.stated_reads import MISSES, STATED_RATES, reads_table
from pipeline.report.tables import markdown
from pipeline.systems import BY_NAME

# (target, baseline): the Searcher-level comparisons the paper's claims rest on
PAIRS: tuple[tuple[str, str], ...] = (
    ("c_mas_rl", "c_mas_base"),
    ("multiagent_opd", "h_mas_base"),
    ("multiagent_opd", "ablation_no_searcher_supervision"),
    ("multiagent_opd", "ablation_outcome_rl_searcher"),
    ("multiagent_opd", "ablation_base_teacher"),
    ("multiagent_opd", "prompted_critic"),
)
FIGURE = "figures/funnel.png"  # relative to the report folder
NOT_MEASURED = "not measured"


@dataclass
class Points:
    systems: list[str]  # the systems whose records have the funnel, in registry order
    table: pd.DataFrame  # pipeline.eval.funnel_metrics.funnel_table
    roles: pd.DataFrame  # pipeline.eval.funnel_metrics.role_table
    # "target-baseline" -> rate key -> {diff, low, high}, or None when not measurable
    gaps: dict[str, dict[str, dict[str, float] | None]] = field(default_factory=dict)
    # facts read (pipeline.eval.stated_reads.reads_table) of the systems in `stated`; empty without hops
    reads: pd.DataFrame = field(default_factory=pd.DataFrame)
    stated: list[str] = field(default_factory=list)

    def rates(self) -> tuple:
        """The role-level rates measured here: the funnel's, and the facts-read ones where measured."""
        return RATES + (STATED_RATES if self.stated else ())

    def rate(self, system: str, key: str) -> float | None:
        row = self.roles[self.roles["system"] == system] if len(self.roles) else self.roles
        if row.empty or pd.isna(row[key].iloc[0]):
            return None
        return float(row[key].iloc[0])


def pair_key(target: str, baseline: str) -> str:
    return f"{target}-{baseline}"


def measure_points(records: pd.DataFrame, systems: Sequence[str], draws: int, seed: int, level: float,
                   stated: Sequence[str] = ()) -> Points:
    """The funnel of every system in `systems` (those whose records have its columns) and the
    PAIRS among them, with the EM gaps' bootstrap draws and seed; the facts read of the systems in
    `stated` (all of `systems`, or none: records with pipeline.eval.stated_reads' columns)."""
    systems = list(systems)
    if not systems:
        return Points([], pd.DataFrame(), pd.DataFrame())
    stated = [s for s in systems if s in stated] if set(systems) <= set(stated) else []
    mine = records[records["system"].isin(systems)]
    roles = role_table(mine, systems)
    if stated:
        for rate in STATED_RATES:
            roles[rate.key] = [rate_value(mine[mine["system"] == s], rate) for s in roles["system"]]
    points = Points(systems, funnel_table(mine, systems), roles, reads=reads_table(mine, stated) if stated
                    else pd.DataFrame(), stated=stated)
    for target, baseline in PAIRS:
        if target in systems and baseline in systems:
            pair = mine[mine["system"].isin([target, baseline])]
            points.gaps[pair_key(target, baseline)] = {
                r.key: paired_rate_gap(pair, target, baseline, r, draws=draws, seed=seed, level=level)
                for r in points.rates()}
    return points


def _pct(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.1f}"


def _num(value: Any) -> str:
    return "-" if value is None or pd.isna(value) else f"{value:.2f}"


def _gap(gap: dict[str, float] | None, digits: int = 2) -> str:
    if gap is None:
        return NOT_MEASURED
    return f"{gap['diff']:+.{digits}f} [{gap['low']:.{digits}f}, {gap['high']:.{digits}f}]"


def _label(system: str) -> str:
    return BY_NAME[system].label


def funnel_markdown(points: Points) -> str:
    """One row per system, one column per kind of question: the share of its workflows that
    reached each step, retrieved -> reported -> handed -> correct."""
    kinds = [c for c in (*CATEGORIES, "all") if (points.table["category"] == c).any()]
    headers = ["system", *(f"{c}{' questions' if c == 'all' else ''}: " + " → ".join(STEPS) for c in kinds)]
    rows = []
    for system in points.systems:
        mine = points.table[points.table["system"] == system].set_index("category")
        rows.append([_label(system), *(" → ".join(_pct(mine.loc[c, s]) for s in STEPS) if c in mine.index else "-"
                                        for c in kinds)])
    return markdown((headers, rows))


def lost_markdown(points: Points) -> str:
    """Where the wrong workflows were lost, over every question: one row per system."""
    headers = ["system", "workflows", "correct", *(f"lost at {name}" for name in LOST)]
    rows = []
    for row in points.table[points.table["category"] == "all"].to_dict("records"):
        rows.append([_label(row["system"]), f"{row['workflows']:,}", _pct(row["correct"]),
                     *(_pct(row[f"lost at {name}"]) for name in LOST)])
    return markdown((headers, rows))


def roles_markdown(points: Points) -> str:
    headers = ["system", "Searcher fidelity (%)", "searches per Searcher call", "Searcher calls per workflow",
               "Leader waves per workflow", "bridges used (% of chain questions)",
               "Answerer accuracy on what it was handed (%)"]
    rows = []
    for row in points.roles.to_dict("records"):
        rows.append([_label(row["system"]), _pct(row["searcher_fidelity"]), _num(row["searches_per_searcher_call"]),
                     _num(row["searcher_calls_per_workflow"]), _num(row["leader_waves_per_workflow"]),
                     _pct(row["bridge_share"]), _pct(row["answerer_accuracy_given_handed"])])
    return markdown((headers, rows))


def reads_markdown(points: Points) -> str:
    """Facts read: per system, single-hop Searcher calls and chain hops, string test beside stating passage."""
    headers = ["system", "single-hop calls that read the answer: string test / stating passage (%)",
               "fidelity: string test / stating passage (%)",
               *(f"{MISS_TITLES[m]} (% of stating reads)" for m in MISSES),
               "2- and 3-hop chain hops read: string test / stating passage (%)"]
    rows = []
    for system in points.stated:
        mine = points.reads[points.reads["system"] == system].set_index("category")
        if "single-hop" not in mine.index:
            continue
        one = mine.loc["single-hop"]
        chains = points.reads[(points.reads["system"] == system) & points.reads["category"].isin(["2-hop", "3-hop"])]
        total = chains["hop_count"].sum()
        hops = [(chains[k] * chains["hop_count"]).sum() / total if total else None
                for k in ("hops_retrieved", "hops_stated")]
        rows.append([_label(system), f"{_pct(one['read'])} / {_pct(one['stated'])}",
                     f"{_pct(one['fidelity'])} / {_pct(one['fidelity_stated'])}", *(_pct(one[m]) for m in MISSES),
                     f"{_pct(hops[0])} / {_pct(hops[1])}"])
    return markdown((headers, rows))


READS_NOTE = (
    "**Facts read** (`pipeline/eval/stated_reads.py`). The string test above counts a call as a read when any "
    "passage it read holds the answer, a coincidental mention included; here a call also counts as reading a "
    "hop's fact when it read the hop's *stating passage* (titled by the hop's subject, holding its answer). "
    "*Fidelity*: of those calls, the share whose report kept the answer. A miss is classed by the report's "
    "closest sentence among the passages the call read: the stating sentence copied wrong (another name, month "
    "or day), another sentence copied verbatim (another relation's), another sentence copied wrong, or no "
    "report. Chain hops: the share of the hops of 2- and 3-hop questions some call read.")
MISS_TITLES = {"copied_wrong": "single-hop misses: right sentence copied wrong",
               "other_verbatim": "another sentence verbatim", "other_copied_wrong": "another sentence copied wrong",
               "empty": "empty report"}


def gaps_markdown(points: Points, level: int) -> str:
    rates = points.rates()
    headers = ["comparison", *(f"{r.title}: gap [{level}% interval]" for r in rates)]
    rows = []
    for target, baseline in PAIRS:
        entry = points.gaps.get(pair_key(target, baseline))
        cells = [NOT_MEASURED] * len(rates) if entry is None else [_gap(entry[r.key]) for r in rates]
        rows.append([f"{_label(target)} - {_label(baseline)}", *cells])
    return markdown((headers, rows))


def points_section(points: Points, present: Sequence[str], level: int, draws: int, figure: str | None) -> str:
    """Markdown of the section; systems evaluated before the funnel existed are named as not measured."""
    unmeasured = [s for s in present if s not in points.systems]
    if not points.systems:
        return ("Not measured: no system's evaluation records have the funnel's columns (records written "
                "before the funnel was added; re-run the evaluation stages).")
    intro = (
        "Each workflow is followed from the passages its Searchers read to its answer (`pipeline/eval/funnel.py`). "
        "For a single-hop or chain question: was the gold answer **retrieved** (in a passage some Searcher read), "
        "**reported** (in some Searcher's report), **handed** to the Answerer (in a report it was given: the ones "
        "the Leader chose, or all of them when the answer was forced), and answered **correctly** (strict EM). "
        "For a comparison, the first three steps ask for the answers of every hop (both compared values). An "
        "answer is in a text when its EM-normalised form appears there as whole words. A wrong workflow is "
        "*lost* at its first failed step; the lost shares and the correct share add up to 100. Shares are in "
        "percent of the workflows of each kind, pooled over datasets.")
    role_note = (
        "**Per role.** *Searcher fidelity*: of the Searcher calls that read a hop answer their own task did not "
        "name, the share whose report kept one (pooled over calls). *Bridges used*: of the hierarchy's "
        "workflows on chain questions of two or more hops, the share where a later wave's task named an earlier "
        "hop's answer. *Answerer accuracy on what it was handed*: of the workflows whose handed reports held "
        "the gold answer, the share answered correctly.")
    gap_note = (
        f"**Role-level comparisons**, paired bootstrap ({draws} draws: questions resampled within each "
        "dataset, the very draws of the macro EM gaps), each rate pooled over the resampled questions' calls or "
        f"workflows; a gap is target minus baseline, in points for shares, with its {level}% interval.")
    parts = [intro, "**The funnel** (percent of each kind's workflows at each step)", funnel_markdown(points),
             "**Where the points are lost** (percent of all workflows)", lost_markdown(points)]
    if figure:
        parts.append(f"![Where each system's workflows lose their points, by kind of question]({figure})")
    parts += [role_note, roles_markdown(points)]
    if points.stated:
        parts += [READS_NOTE, reads_markdown(points)]
    parts += [gap_note, gaps_markdown(points, level)]
    if unmeasured:
        parts.append("Not measured for " + ", ".join(_label(s) for s in unmeasured)
                     + ": their evaluation records predate the funnel.")
    return "\n\n".join(parts)


def record_entry(points: Points) -> dict[str, Any] | None:
    """The draw record's `funnel` field: each system's rates and the PAIRS' gaps (None: not measured)."""
    if not points.systems:
        return None
    return {
        "rates": {s: {r.key: points.rate(s, r.key) for r in points.rates()} for s in points.systems},
        "comparisons": {key: {rate: (None if gap is None else dict(gap)) for rate, gap in entry.items()}
                        for key, entry in points.gaps.items()},
    }
