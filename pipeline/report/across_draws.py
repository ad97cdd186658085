"""The report's "Across draws" section: the paper's seven comparisons in every kept draw
(reports/<profile>/draws/*.json, kept by scripts/draw.py) and in this run, how many of the
intervals lie above 0, and per draw two checks of Stage II's behaviour.

This run is a row of its own unless a kept draw came from the same models (its `hashes.models`
equal this run's, pipeline.draws.record.same_models): then that draw is this run, kept already,
and its row shows this run's numbers under the kept name. Equal scores never make two runs one.
Draws evaluated on another number of test questions are listed and marked as a different test set.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pipeline.draws.record import comparison_key, kept_name, load_kept, same_models
from pipeline.eval.funnel_metrics import RATES
from pipeline.report import comparisons as cmp
from pipeline.report import figures, points
from pipeline.report import published as pub
from pipeline.report.tables import markdown
from pipeline.systems import BY_NAME, TRAINED

STAGE_TWO = tuple(s.name for s in TRAINED if s.workflow == "hierarchy")
FORCED_WITHIN = 3.0  # points of H-MAS base's forced-answer share
KL_FALL_TARGET = 20.0  # percent: OPD's dev Searcher KL, first to last point
NOT_MEASURED = "not measured"
DRAWS_FIGURE = "figures/draws_forest.png"  # relative to the report folder
THIS_RUN = "this run"


@dataclass(frozen=True)
class DrawRow:
    name: str
    record: Mapping[str, Any]  # a draw record (pipeline.draws.record)
    this_run: bool  # this run, alone or as the kept draw with exactly its scores
    other_test_set: bool  # evaluated on another number of test questions than this run
    kept: bool = True  # a file of reports/<profile>/draws/; False: this run, not kept

    @property
    def label(self) -> str:
        label = self.name + (f" ({THIS_RUN})" if self.this_run and self.kept else "")
        if self.other_test_set:
            label += f" (different test set: {self.record['test_questions']} questions)"
        return label

    def gap(self, key: str) -> tuple[float, float, float] | None:
        entry = self.record["comparisons"].get(key)
        if not entry or entry["diff"] is None:
            return None
        return float(entry["diff"]), float(entry["low"]), float(entry["high"])


def comparison_keys() -> list[str]:
    return [comparison_key(target, baseline) for target, baseline, _ in cmp.PAIRS]


def comparison_title(key: str) -> str:
    target, baseline = next((t, b) for t, b, _ in cmp.PAIRS if comparison_key(t, b) == key)
    return f"{BY_NAME[target].label} - {BY_NAME[baseline].label}"


# what a kept draw's row takes from this run when it is this run: every number the report measured
MEASURED = ("test_questions", "runs", "level", "systems", "forced_answer_share", "comparisons", "dev_searcher_kl",
            "dedup", "funnel", "hashes")


def load_draws(folder: Path, profile: str) -> list[tuple[str, dict]]:
    """(name, record) of every reports/<profile>/draws/*.json, by file name; none without the
    folder; InputError when two came from the same models (pipeline.draws.record.load_kept)."""
    return [(kept_name(path, record), record) for path, record in load_kept(folder, profile)]


def draw_rows(kept: Sequence[tuple[str, Mapping]], this_run: Mapping[str, Any], commit: str) -> list[DrawRow]:
    """Every kept draw, then this run (with `commit`) unless a kept draw came from the same
    models (that row then shows this run's numbers) or this run evaluated no system."""
    rows, found = [], False
    for name, record in kept:
        same = bool(this_run["systems"]) and same_models(record, this_run)
        if same:
            record = {**record, **{key: this_run.get(key) for key in MEASURED}}
        found = found or same
        rows.append(DrawRow(name, record, same, record["test_questions"] != this_run["test_questions"]))
    if not found and this_run["systems"]:
        rows.append(DrawRow(THIS_RUN, {**this_run, "commit": commit}, True, False, kept=False))
    return rows


def _cell(value: Any) -> str:
    return "-" if value is None or value == "" else str(value).replace("|", "\\|").replace("\n", " ")


def short_commit(commit: str | None) -> str:
    if not commit:
        return "-"
    sha = commit.removesuffix("-dirty")
    short = sha[:7] if re.fullmatch(r"[0-9a-f]{8,40}", sha) else sha
    return short + ("-dirty" if commit.endswith("-dirty") else "")


def above_zero(gap: tuple[float, float, float] | None) -> str:
    return NOT_MEASURED if gap is None else ("yes" if gap[1] > 0 else "no")


def count_line(rows: Sequence[DrawRow], key: str) -> str:
    """In how many draws the interval of comparison `key` lies above 0 (and below, or across)."""
    measured = [(r, g) for r in rows if (g := r.gap(key)) is not None]
    if not measured:
        return "Not measured in any draw."

    def counts(pairs) -> tuple[int, int, int]:
        return (sum(g[1] > 0 for _, g in pairs), sum(g[2] < 0 for _, g in pairs),
                sum(g[1] <= 0 <= g[2] for _, g in pairs))

    above, below, across = counts(measured)
    line = (f"Interval above 0 in {above} of {len(measured)} draws (below 0 in {below}, including 0 in "
            f"{across}).")
    same = [(r, g) for r, g in measured if not r.other_test_set]
    if len(same) < len(measured):
        line += f" On this run's test set: above 0 in {counts(same)[0]} of {len(same)}."
    if len(same) >= 2:  # the spread between training runs, which no single draw's interval shows
        diffs = [g[0] for _, g in same]
        line += (f" Mean gap over {'these' if len(same) < len(measured) else 'the'} {len(same)} draws "
                 f"{statistics.mean(diffs):+.2f}, standard deviation between draws {statistics.stdev(diffs):.2f}.")
    return line


def _total(value: Any, combine) -> str:
    if value is None:
        return "-"
    if isinstance(value, dict):
        numbers = [v for v in value.values() if v is not None]
        return f"{combine(numbers):,.0f}" if numbers else "-"
    return f"{value:,.0f}"


def forced_check(shares: Mapping[str, float | None]) -> str:
    """Whether every Stage-II system's forced-answer share is within FORCED_WITHIN points of
    H-MAS base's."""
    base = shares.get("h_mas_base")
    present = {s: shares[s] for s in STAGE_TWO if shares.get(s) is not None}
    if base is None or not present:
        return NOT_MEASURED
    worst, distance = max(((s, abs(v - base)) for s, v in present.items()), key=lambda item: item[1])
    partial = "" if len(present) == len(STAGE_TWO) else f"; {len(present)} of {len(STAGE_TWO)} Stage-II systems"
    return (f"{'yes' if distance <= FORCED_WITHIN else 'no'} (largest difference {distance:.1f} points, "
            f"{BY_NAME[worst].label}{partial})")


def kl_fall(kl: Mapping[str, Mapping[str, float]]) -> tuple[str, str]:
    """OPD's dev Searcher KL first -> last, and its fall in percent against KL_FALL_TARGET."""
    opd = kl.get("multiagent_opd")
    if not opd:
        return NOT_MEASURED, "-"
    first, last = float(opd["first"]), float(opd["last"])
    text = f"{first:.4f} → {last:.4f}"
    if first <= 0:
        return text, "-"
    fall = 100.0 * (first - last) / first
    return text, f"{fall:.0f}% ({'at least' if fall >= KL_FALL_TARGET else 'below'} {KL_FALL_TARGET:.0f}%)"


def comparison_table(rows: Sequence[DrawRow], key: str, level: int) -> str:
    headers = ["draw", "seed set", "CPU kind", "precision", "commit", f"gap [{level}% interval]", "interval above 0"]
    body = []
    for r in rows:
        gap = r.gap(key)
        body.append([_cell(r.label), _cell(r.record["seed_set"]), _cell(r.record["cpu"]),
                     _cell(r.record["precision"]), _cell(short_commit(r.record.get("commit"))),
                     f"{gap[0]:+.2f} [{gap[1]:.2f}, {gap[2]:.2f}]" if gap else NOT_MEASURED, above_zero(gap)])
    return markdown((headers, body))


def per_draw_table(rows: Sequence[DrawRow]) -> str:
    headers = ["draw", "date", "test questions", "stage minutes", "peak RSS (MB)",
               f"Stage-II forced-answer shares within {FORCED_WITHIN:.0f} points of H-MAS base's",
               "MultiAgent-OPD dev Searcher KL, first → last", "fall"]
    body = []
    for r in rows:
        kl, fall = kl_fall(r.record["dev_searcher_kl"])
        body.append([_cell(r.label), _cell(r.record.get("date")), str(r.record["test_questions"]),
                     _total(r.record.get("stage_minutes"), sum), _total(r.record.get("peak_rss_mb"), max),
                     forced_check(r.record["forced_answer_share"]), kl, fall])
    return markdown((headers, body))


def across_draws_section(rows: Sequence[DrawRow], profile: str, level: int, runs: int,
                         figure: str | None = None) -> str:
    """Markdown: one table per comparison (a row per draw), its count of intervals above 0, and
    the per-draw checks; `figure` (relative to the report folder) is the forest plot."""
    folder = f"reports/{profile}/draws/"
    kept = sum(r.kept for r in rows)
    if not rows:
        return (f"No draw is kept in `{folder}` and this run evaluated no system: nothing to compare across "
                "draws.")
    joined = next((r for r in rows if r.this_run and r.kept), None)
    if not kept:
        rows_text = f"No draw is kept in `{folder}` yet (`scripts/draw.py` keeps one): the only row is this run."
    else:
        rows_text = (f"Rows: the {kept} draw{'s' if kept != 1 else ''} kept in `{folder}` (kept by `scripts/draw.py`)"
                     + (f"; this run came from the same models as the kept draw {joined.name} (their content "
                        "hashes are equal), so it is that row, with this run's numbers."
                        if joined else ", and this run." if any(r.this_run for r in rows) else
                        "; this run evaluated no system."))
    intro = ["A draw is one full run of the pipeline under a seed set (`configs/seed_sets.yaml`), a CPU kind and "
             f"a precision path. {rows_text} Each gap is the macro avg@{runs} difference with its {level}% paired "
             "bootstrap interval."]
    if any(r.other_test_set for r in rows):
        intro.append("A draw marked *different test set* was evaluated on another number of test questions than "
                     "this run's; the counts below say how many draws share this run's test set.")
    if figure:
        intro.append(f"![Across draws: each comparison's gap per draw, with the published value]({figure})")
    parts = ["\n\n".join(intro)]
    for target, baseline, _ in cmp.PAIRS:
        key = comparison_key(target, baseline)
        parts.append(f"**{comparison_title(key)}** ({pub.LABEL}: "
                     f"{cmp.format_published(cmp.published_gap(target, baseline))})\n\n"
                     f"{comparison_table(rows, key, level)}\n\n{count_line(rows, key)}")
    parts.append(role_level_section(rows, level))
    parts.append(f"**Per draw.** Forced answers: whether every Stage-II system's share of workflows whose answer "
                 f"was forced lies within {FORCED_WITHIN:.0f} points of H-MAS base's. Dev Searcher KL: "
                 f"MultiAgent-OPD's KL to the Stage-I Teacher at the first and last point of training, and its "
                 f"fall in percent (target: at least {KL_FALL_TARGET:.0f}%).\n\n{per_draw_table(rows)}")
    return "\n\n".join(parts)


def role_gap(row: DrawRow, pair: str, rate: str) -> tuple[float, float, float] | None:
    funnel = row.record.get("funnel")
    entry = ((funnel or {}).get("comparisons") or {}).get(pair) or {}
    gap = entry.get(rate)
    return None if gap is None else (float(gap["diff"]), float(gap["low"]), float(gap["high"]))


def role_level_section(rows: Sequence[DrawRow], level: int) -> str:
    """One table per role-level rate (pipeline.report.points): a row per draw, a column per
    comparison, and the count of intervals above 0; draws made before the funnel say so."""
    pairs = [(points.pair_key(t, b), f"{BY_NAME[t].label} - {BY_NAME[b].label}") for t, b in points.PAIRS]
    parts = [f"**Role-level comparisons** (section *Where the points go*): each gap with its {level}% paired "
             f"interval, in every draw whose evaluation records have the funnel; older draws: {NOT_MEASURED}."]
    for rate in RATES:
        body = []
        for r in rows:
            cells = []
            for key, _ in pairs:
                gap = role_gap(r, key, rate.key)
                cells.append(NOT_MEASURED if gap is None else f"{gap[0]:+.2f} [{gap[1]:.2f}, {gap[2]:.2f}]")
            body.append([_cell(r.label), *cells])
        counts = []
        for key, _ in pairs:
            measured = [g for r in rows if (g := role_gap(r, key, rate.key)) is not None]
            counts.append(f"{sum(g[1] > 0 for g in measured)} of {len(measured)}" if measured else NOT_MEASURED)
        body.append(["interval above 0", *counts])
        parts.append(f"*{rate.title}*\n\n" + markdown((["draw", *(title for _, title in pairs)], body)))
    return "\n\n".join(parts)


def draws_figure(rows: Sequence[DrawRow], level: int, runs: int, path: Path) -> bool:
    """The forest plot of every comparison across the draws (figures.draws_forest) at `path`;
    False, and nothing drawn, when no draw measured any comparison."""
    if not any(r.gap(key) is not None for r in rows for key in comparison_keys()):
        return False
    pairs = [(comparison_key(t, b), comparison_title(comparison_key(t, b)), BY_NAME[b].colour) for t, b, _ in cmp.PAIRS]
    figures.draws_forest([r.label for r in rows], pairs, {key: [r.gap(key) for r in rows] for key, _, _ in pairs},
                         {comparison_key(t, b): cmp.published_gap(t, b) for t, b, _ in cmp.PAIRS},
                         [r.other_test_set for r in rows], level, runs, path)
    return True
