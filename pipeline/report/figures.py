"""Matplotlib figures of the report (PNG, Agg backend).

Every figure takes its metrics and systems as lists, shows intervals where the report
computed them, says how many questions stand behind each point, keeps our numbers and the
published ones on separate panels, and puts its legend outside the data. Each system is drawn
in its one colour (pipeline.systems).

Figures are drawn for the report's page: at most PAGE_WIDTH_PX wide, so the browser shows
them at their own size, with no text below MIN_TEXT_PX there. Titles are wrapped to their
panel's width, so neighbouring titles never overlap. Each drawing function returns the
`Layout` it measured (the tests hold every figure to both rules), and a figure that breaks
either is logged as a warning.
"""

from __future__ import annotations

import logging
import math
import struct
import textwrap
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from matplotlib.text import Text

from pipeline.io import atomic_path
from pipeline.report.curves import Curve, CurveMetric, questions_per_point
from pipeline.systems import BY_NAME

log = logging.getLogger(__name__)
PAGE_WIDTH_PX = 1100  # the report page's content width (pipeline.report.paper's style)
DPI = 100
MIN_TEXT_PX = 10.0  # the smallest text on the page, in CSS pixels
FONT_PT = 10  # every text of a figure: 10 pt at 100 dpi is 13.9 px
WIDTH_IN = 10.5  # 1,050 px: a figure fits the page without being scaled down
PANEL_CHARS = 52  # characters per title line in a half-width panel at FONT_PT


@dataclass(frozen=True)
class Layout:
    """What a saved figure measures on the report's page."""

    width_px: int  # of the PNG
    min_text_px: float  # the smallest text as the page shows it
    overlaps: list[tuple[str, str]] = field(default_factory=list)  # titles that overlap a title or a panel


def _label(system: str) -> str:
    return BY_NAME[system].label if system in BY_NAME else system


def _colour(system: str, fallback: str = "#333333") -> str:
    return BY_NAME[system].colour if system in BY_NAME else fallback


def _wrap(text: str, width: int = PANEL_CHARS) -> str:
    return "\n".join(textwrap.wrap(text, width)) or text


def _png_width(path: Path) -> int:
    return struct.unpack(">I", path.read_bytes()[16:20])[0]


def _shown(text: Text) -> bool:
    return bool(text.get_visible() and text.get_text().strip() and (text.axes is None or text.axes.get_visible()))


def measure(fig, width_px: int) -> Layout:
    """The smallest text of `fig` as a page of PAGE_WIDTH_PX shows a `width_px` image of it,
    and every axes title that overlaps another visible title or another panel."""
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    scale = min(1.0, PAGE_WIDTH_PX / width_px)
    sizes = [t.get_fontsize() for t in fig.findobj(Text) if _shown(t)]
    axes = [ax for ax in fig.axes if ax.get_visible()]
    titles = [(ax, ax.title) for ax in axes if ax.title.get_text().strip()]
    overlaps = []
    for i, (ax, title) in enumerate(titles):
        box = title.get_window_extent(renderer)
        for _, other in titles[i + 1:]:
            if box.overlaps(other.get_window_extent(renderer)):
                overlaps.append((title.get_text(), other.get_text()))
        for other_ax in axes:
            if other_ax is not ax and box.overlaps(other_ax.get_window_extent(renderer)):
                overlaps.append((title.get_text(), f"panel {other_ax.get_title() or '(untitled)'}"))
    return Layout(width_px, min(sizes) * DPI / 72 * scale if sizes else float("inf"), overlaps)


def _save(fig, path: Path) -> Layout:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=DPI, bbox_inches="tight")
        layout = measure(fig, _png_width(Path(tmp)))
    plt.close(fig)
    if layout.min_text_px < MIN_TEXT_PX or layout.overlaps:
        log.warning("%s: text down to %.1f px on the page (at least %g wanted), overlapping titles: %s",
                    path.name, layout.min_text_px, MIN_TEXT_PX, layout.overlaps)
    return layout


def _figure(rows: int, columns: int, height_in: float, **kw):
    with plt.rc_context({"font.size": FONT_PT, "axes.titlesize": FONT_PT, "axes.labelsize": FONT_PT,
                         "xtick.labelsize": FONT_PT, "ytick.labelsize": FONT_PT, "legend.fontsize": FONT_PT}):
        return plt.subplots(rows, columns, figsize=(WIDTH_IN, height_in), squeeze=False, layout="constrained",
                            **kw)


def training_curves(curves: Mapping[str, Curve], metrics: Sequence[CurveMetric], path: Path,
                    columns: int = 2) -> Layout | None:
    """One panel per metric (against the training step), one line per system in its colour;
    each panel's title says what is plotted and how many questions stand behind a point. The
    legend takes the free panel when there is one, else sits below the panels. Returns None
    (and draws nothing) when no curve has a point of any of the metrics."""
    drawn = [m for m in metrics if any(not c.points(m.key).empty for c in curves.values())]
    if not drawn:
        return None
    columns = max(1, min(columns, len(drawn)))
    rows = math.ceil(len(drawn) / columns)
    fig, axes = _figure(rows, columns, 3.4 * rows + 0.9)
    for ax, metric in zip(axes.flat, drawn):
        for system, curve in curves.items():
            points = curve.points(metric.key)
            if not points.empty:
                ax.plot(points["step"], points[metric.key], marker="o", markersize=4, color=_colour(system),
                        label=_label(system))
        n = questions_per_point(curves, metric.key)
        ax.set_title(_wrap(metric.title + (f" (n = {n} questions per point)" if n else ""),
                           PANEL_CHARS * 2 // columns), fontsize=FONT_PT)
        ax.set_xlabel("training step", fontsize=FONT_PT)
        ax.set_ylabel(_wrap(metric.unit or metric.key, 28), fontsize=FONT_PT)
        ax.tick_params(labelsize=FONT_PT)
        ax.grid(alpha=0.3)
    spare = list(axes.flat)[len(drawn):]
    for ax in spare:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=_colour(s), marker="o", markersize=4, label=_label(s)) for s in curves]
    if spare:
        spare[0].set_visible(True)
        spare[0].axis("off")
        spare[0].legend(handles=handles, loc="center", fontsize=FONT_PT, frameon=False, title="system",
                        title_fontsize=FONT_PT)
    else:
        fig.legend(handles=handles, loc="outside lower center", ncol=min(3, len(handles)), fontsize=FONT_PT,
                   frameon=False)
    return _save(fig, path)


def _system_axis(ax, y: list[int], systems: list[str]) -> None:
    ax.set_yticks(y, [_label(s) for s in systems], fontsize=FONT_PT)
    for tick, system in zip(ax.get_yticklabels(), systems):
        tick.set_color(_colour(system, "black"))


def macro_with_intervals(intervals: pd.DataFrame, published: Mapping[str, float], measure: str, level: int,
                         profile: str, path: Path) -> Layout:
    """Left: our macro `measure` per system with its bootstrap interval; right: the published
    value. Separate axes: the two come from different models and data. Each system in its
    colour, its name too."""
    ours = intervals[intervals["measure"] == measure].set_index("system")
    systems = [s for s in published if s in ours.index] + [s for s in ours.index if s not in published]
    y = list(range(len(systems)))[::-1]
    fig, axes = _figure(1, 2, 0.45 * len(systems) + 2.0, sharey=True)
    ax_ours, ax_pub = axes[0]
    for yi, system in zip(y, systems):
        row = ours.loc[system]
        ax_ours.errorbar(row["value"], yi, xerr=[[row["value"] - row["low"]], [row["high"] - row["value"]]],
                         fmt="o", color=_colour(system), capsize=3)
        if system in published:
            ax_pub.plot(published[system], yi, "s", color=_colour(system))
    n = int(ours["questions"].max()) if len(ours) else 0
    datasets = int(ours["datasets"].max()) if len(ours) else 0
    ax_ours.set_title(_wrap(f"Ours ({profile}): macro {measure} with its {level}% bootstrap interval; "
                            f"n = {n} test questions per system ({datasets} datasets)"), fontsize=FONT_PT)
    ax_pub.set_title(_wrap(f"Published (Qwen3-4B, the paper): macro {measure.split('@')[0]}@4; "
                           "the paper gives no interval"), fontsize=FONT_PT)
    _system_axis(ax_ours, y, systems)
    for ax in (ax_ours, ax_pub):
        ax.set_xlabel(f"macro {measure.split('@')[0]}@4, percent" if ax is ax_pub else f"macro {measure}, percent",
                      fontsize=FONT_PT)
        ax.tick_params(labelsize=FONT_PT)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


def gaps_with_intervals(gaps: pd.DataFrame, published: Mapping[str, tuple[float, float, float]], target: str,
                        level: int, questions: int, path: Path) -> Layout:
    """The paired gap target - baseline per baseline with its interval: ours on the left, the
    published ones on the right (separate axes), a line at zero on both. Each gap in its
    baseline's colour."""
    baselines = list(gaps["baseline"])
    y = list(range(len(baselines)))[::-1]
    fig, axes = _figure(1, 2, 0.45 * len(baselines) + 2.0, sharey=True)
    ax_ours, ax_pub = axes[0]
    for yi, row in zip(y, gaps.itertuples(index=False)):
        ax_ours.errorbar(row.diff, yi, xerr=[[row.diff - row.low], [row.high - row.diff]], fmt="o",
                         color=_colour(row.baseline), capsize=3)
        if row.baseline in published:
            diff, low, high = published[row.baseline]
            ax_pub.errorbar(diff, yi, xerr=[[diff - low], [high - diff]], fmt="s", color=_colour(row.baseline),
                            capsize=3)
    ax_ours.set_title(_wrap(f"Ours: {_label(target)} minus each system, macro avg@4, with the {level}% paired "
                            f"bootstrap interval; n = {questions} test questions per system"), fontsize=FONT_PT)
    ax_pub.set_title(_wrap(f"Published (Qwen3-4B, the paper): {_label(target)} minus each system; "
                           f"{len(published)} gaps published with intervals"), fontsize=FONT_PT)
    _system_axis(ax_ours, y, baselines)
    for ax in (ax_ours, ax_pub):
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_xlabel(_wrap(f"gap in macro avg@4, percentage points ({_label(target)} minus the system)"),
                      fontsize=FONT_PT)
        ax.tick_params(labelsize=FONT_PT)
        ax.grid(axis="x", alpha=0.3)
    return _save(fig, path)


PUBLISHED_COLOUR = "#444444"


def draws_forest(labels: Sequence[str], comparisons: Sequence[tuple[str, str, str]],
                 gaps: Mapping[str, Sequence[tuple[float, float, float] | None]],
                 published: Mapping[str, tuple[float, float | None, float | None]], other_test_set: Sequence[bool],
                 level: int, runs: int, path: Path, columns: int = 2) -> Layout:
    """A forest plot across draws: one panel per comparison (`comparisons`: key, title, colour),
    one horizontal interval per draw (`labels`, the same rows in every panel), a line at 0, and
    the published value as a dashed line labelled "published" (its interval shaded where the
    paper gives one). A draw on a different test set (`other_test_set`) is drawn hollow. The
    legend takes the free panel when there is one, else sits below the panels."""
    rows = math.ceil(len(comparisons) / columns)
    y = list(range(len(labels)))[::-1]
    fig, axes = _figure(rows, columns, (0.3 * len(labels) + 1.5) * rows + 0.4, sharey=True)
    for ax, (key, title, colour) in zip(axes.flat, comparisons):
        ax.axvline(0, color="grey", linewidth=0.8)
        diff, low, high = published[key]
        if low is not None and high is not None:
            ax.axvspan(low, high, color=PUBLISHED_COLOUR, alpha=0.12, linewidth=0)
        ax.axvline(diff, color=PUBLISHED_COLOUR, linestyle="--", linewidth=1.2)
        measured = [(yi, g, other) for yi, g, other in zip(y, gaps[key], other_test_set) if g is not None]
        for yi, (gap, lo, hi), other in measured:
            ax.errorbar(gap, yi, xerr=[[gap - lo], [hi - gap]], fmt="o", color=colour, capsize=3,
                        markerfacecolor="white" if other else colour)
        right = diff > sum(ax.get_xlim()) / 2  # the label on the side of the line with more room
        ax.text(diff, 0.99, "published " if right else " published", transform=ax.get_xaxis_transform(),
                ha="right" if right else "left", va="top", color=PUBLISHED_COLOUR, fontsize=FONT_PT)
        above = sum(g[1] > 0 for _, g, _ in measured)
        ax.set_title(_wrap(f"{title}: interval above 0 in {above} of {len(measured)} draws",
                           PANEL_CHARS * 2 // columns), fontsize=FONT_PT)
        ax.set_xlabel(f"gap in macro avg@{runs}, points", fontsize=FONT_PT)
        ax.set_ylim(-0.7, len(labels) - 0.3)
        ax.tick_params(labelsize=FONT_PT)
        ax.grid(axis="x", alpha=0.3)
    axes.flat[0].set_yticks(y, [_wrap(label, 30) for label in labels], fontsize=FONT_PT)
    spare = list(axes.flat)[len(comparisons):]
    for ax in spare:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color="black", marker="o", label=f"a draw: gap with its {level}% paired interval"),
               plt.Line2D([], [], color="black", marker="o", markerfacecolor="white",
                          label="a draw on a different test set"),
               plt.Line2D([], [], color=PUBLISHED_COLOUR, linestyle="--", label="published (Qwen3-4B, paper)"),
               plt.Rectangle((0, 0), 1, 1, color=PUBLISHED_COLOUR, alpha=0.12, label="published interval")]
    if not any(other_test_set):
        handles.pop(1)
    if spare:
        spare[0].set_visible(True)
        spare[0].axis("off")
        spare[0].legend(handles=handles, loc="center", fontsize=FONT_PT, frameon=False)
    else:
        fig.legend(handles=handles, loc="outside lower center", ncol=2, fontsize=FONT_PT, frameon=False)
    return _save(fig, path)


# correct, then the steps where a wrong workflow was lost, from the Answerer back to retrieval
FUNNEL_SEGMENTS = (("correct", "#2e7d32"), ("lost at Answerer", "#a5d6a7"), ("lost at hand-off", "#ffcc80"),
                   ("lost at report", "#ef9a9a"), ("lost at retrieval", "#bdbdbd"))


def funnel_bars(table: pd.DataFrame, categories: Sequence[str], path: Path, columns: int = 2) -> Layout | None:
    """One panel per kind of question (`categories` present in `table`, a
    pipeline.eval.funnel_metrics.funnel_table), one horizontal bar per system: its workflows'
    share answered correctly, then the shares lost at each step, adding up to 100. None (nothing
    drawn) when the table has none of the categories."""
    drawn = [c for c in categories if (table["category"] == c).any()] if len(table) else []
    if not drawn:
        return None
    columns = max(1, min(columns, len(drawn)))
    rows = math.ceil(len(drawn) / columns)
    systems = list(dict.fromkeys(table["system"]))
    y = list(range(len(systems)))[::-1]
    fig, axes = _figure(rows, columns, (0.32 * len(systems) + 1.3) * rows + 0.8, sharex=True)
    for ax, category in zip(axes.flat, drawn):
        part = table[table["category"] == category].set_index("system")
        for yi, system in zip(y, systems):
            if system not in part.index:
                continue
            left = 0.0
            for column, colour in FUNNEL_SEGMENTS:
                value = float(part.loc[system, column])
                ax.barh(yi, value, left=left, color=colour, height=0.7)
                left += value
        n = int(part["workflows"].max()) if len(part) else 0
        ax.set_title(_wrap(f"{category} questions ({n:,} workflows per system)", PANEL_CHARS * 2 // columns),
                     fontsize=FONT_PT)
        _system_axis(ax, y, systems)
        ax.set_xlim(0, 100)
        ax.set_xlabel("percent of workflows", fontsize=FONT_PT)
        ax.tick_params(labelsize=FONT_PT)
        ax.grid(axis="x", alpha=0.3)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    handles = [plt.Rectangle((0, 0), 1, 1, color=colour, label=label) for label, colour in FUNNEL_SEGMENTS]
    fig.legend(handles=handles, loc="outside lower center", ncol=3, fontsize=FONT_PT, frameon=False)
    return _save(fig, path)
