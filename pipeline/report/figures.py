"""Matplotlib figures of the report (PNG, Agg backend).

Every figure takes its metrics and systems as lists, shows intervals where the report
computed them, says how many questions stand behind each point, keeps our numbers and the
published ones on separate panels, and puts its legend outside the axes.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from pipeline.io import atomic_path
from pipeline.report.curves import Curve, CurveMetric, questions_per_point
from pipeline.systems import BY_NAME


def _label(system: str) -> str:
    return BY_NAME[system].label if system in BY_NAME else system


def _save(fig, path: Path) -> None:
    with atomic_path(path) as tmp:
        fig.savefig(tmp, format="png", dpi=120, bbox_inches="tight")
    plt.close(fig)


def training_curves(curves: Mapping[str, Curve], metrics: Sequence[CurveMetric], path: Path,
                    columns: int = 2) -> bool:
    """One panel per metric (against the training step), one line per system; each panel's
    title says how many questions stand behind a point. The legend sits below the panels.
    Returns False (and draws nothing) when no curve has a point of any of the metrics."""
    drawn = [m for m in metrics if any(not c.points(m.key).empty for c in curves.values())]
    if not drawn:
        return False
    columns = max(1, min(columns, len(drawn)))
    rows = math.ceil(len(drawn) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(5.5 * columns, 3.6 * rows), squeeze=False)
    colours = {s: f"C{i % 10}" for i, s in enumerate(curves)}
    for ax, metric in zip(axes.flat, drawn):
        for system, curve in curves.items():
            points = curve.points(metric.key)
            if not points.empty:
                ax.plot(points["step"], points[metric.key], marker="o", markersize=3, color=colours[system],
                        label=_label(system))
        n = questions_per_point(curves, metric.key)
        ax.set_title(metric.title + (f" (n = {n} questions per point)" if n else ""), fontsize=10)
        ax.set(xlabel="training step", ylabel=metric.key)
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[len(drawn):]:
        ax.set_visible(False)
    handles = [plt.Line2D([], [], color=colours[s], marker="o", markersize=3, label=_label(s)) for s in curves]
    fig.legend(handles=handles, loc="upper center", bbox_to_anchor=(0.5, 0.0), ncol=min(4, len(handles)),
               fontsize=8, frameon=False)
    fig.tight_layout()
    _save(fig, path)
    return True


def macro_with_intervals(intervals: pd.DataFrame, published: Mapping[str, float], measure: str, level: int,
                         profile: str, path: Path) -> None:
    """Left: our macro `measure` per system with its bootstrap interval; right: the published
    value. Separate axes: the two come from different models and data."""
    ours = intervals[intervals["measure"] == measure].set_index("system")
    systems = [s for s in published if s in ours.index] + [s for s in ours.index if s not in published]
    y = list(range(len(systems)))[::-1]
    fig, (ax_ours, ax_pub) = plt.subplots(1, 2, figsize=(11, 0.45 * len(systems) + 1.8), sharey=True)
    for yi, system in zip(y, systems):
        row = ours.loc[system]
        ax_ours.errorbar(row["value"], yi, xerr=[[row["value"] - row["low"]], [row["high"] - row["value"]]],
                         fmt="o", color="C0", capsize=3)
        if system in published:
            ax_pub.plot(published[system], yi, "s", color="C1")
    n = int(ours["questions"].max()) if len(ours) else 0
    datasets = int(ours["datasets"].max()) if len(ours) else 0
    ax_ours.set_title(f"ours ({profile}): macro {measure}, {level}% interval\n"
                      f"n = {n} test questions per system ({datasets} datasets)", fontsize=9)
    ax_pub.set_title(f"published (Qwen3-4B, paper): macro {measure.split('@')[0]}@4\nno interval published",
                     fontsize=9)
    ax_ours.set_yticks(y, [_label(s) for s in systems], fontsize=8)
    for ax in (ax_ours, ax_pub):
        ax.set_xlabel("percent")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)


def gaps_with_intervals(gaps: pd.DataFrame, published: Mapping[str, tuple[float, float, float]], target: str,
                        level: int, questions: int, path: Path) -> None:
    """The paired gap target - baseline per baseline with its interval: ours on the left, the
    published ones on the right (separate axes), a line at zero on both."""
    baselines = list(gaps["baseline"])
    y = list(range(len(baselines)))[::-1]
    fig, (ax_ours, ax_pub) = plt.subplots(1, 2, figsize=(11, 0.45 * len(baselines) + 1.8), sharey=True)
    for yi, row in zip(y, gaps.itertuples(index=False)):
        ax_ours.errorbar(row.diff, yi, xerr=[[row.diff - row.low], [row.high - row.diff]], fmt="o", color="C0",
                         capsize=3)
        if row.baseline in published:
            diff, low, high = published[row.baseline]
            ax_pub.errorbar(diff, yi, xerr=[[diff - low], [high - diff]], fmt="s", color="C1", capsize=3)
    ax_ours.set_title(f"ours: {_label(target)} - baseline, macro avg, {level}% paired interval\n"
                      f"n = {questions} test questions per system", fontsize=9)
    ax_pub.set_title(f"published (Qwen3-4B, paper): {_label(target)} - baseline\n"
                     f"{len(published)} gaps published with intervals", fontsize=9)
    ax_ours.set_yticks(y, [_label(b) for b in baselines], fontsize=8)
    for ax in (ax_ours, ax_pub):
        ax.axvline(0, color="grey", linewidth=0.8)
        ax.set_xlabel("percentage points")
        ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    _save(fig, path)
