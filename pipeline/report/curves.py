"""Training curves: which per-step metrics the report draws, and their files for `dvc plots`.

A curve metric names the MLflow metric the trainer logs per step and the training run's
param that says how many questions stand behind one point. Adding a diagnostic to the
report is one more `CurveMetric` in `CURVE_METRICS`: the figure gets a panel and
`reports/<profile>/curves/` a file, which dvc.yaml's `plots:` picks up as a plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeline.domain import ROLES
from pipeline.io import atomic_dir


@dataclass(frozen=True)
class CurveMetric:
    key: str  # the MLflow metric key, logged per training step
    title: str  # the figure panel's title
    questions_param: str  # the training run's param: questions behind one point


DEV, BATCH = "shared.dev_questions", "shared.questions_per_batch"
CURVE_METRICS: tuple[CurveMetric, ...] = (
    CurveMetric("dev_em", "dev exact match", DEV),
    CurveMetric("dev_no_search_share", "dev no-search share", DEV),
    CurveMetric("dev_searcher_kl", "dev Searcher KL to the Stage-I Teacher (fixed contexts)", DEV),
    CurveMetric("no_search_share", "training batch no-search share", BATCH),
    CurveMetric("searcher_kl_sampled", "training Searcher KL to its Teacher (sampled)", BATCH),
    *(CurveMetric(f"zero_adv_groups_{role}", f"{role}: share of GRPO groups with zero advantage", BATCH)
      for role in ROLES),
    *(CurveMetric(f"abs_adv_{role}_{kind}", f"{role}: mean |advantage| ({kind.upper()})", BATCH)
      for role in ROLES for kind in ("grpo", "opd")),
    CurveMetric("clip_fraction", "PPO clip fraction", BATCH),
    CurveMetric("entropy", "policy entropy on loss tokens", BATCH),
)


@dataclass
class Curve:
    """One trained system's curves: `frame` holds `step` and one column per metric (NaN
    where a metric was not logged at a step); `questions` the questions per point."""

    system: str
    run_id: str
    frame: pd.DataFrame
    questions: dict[str, int | None] = field(default_factory=dict)

    def points(self, key: str) -> pd.DataFrame:
        """(step, value) rows of one metric, NaN steps dropped."""
        if key not in self.frame:
            return pd.DataFrame({"step": [], key: []})
        return self.frame[["step", key]].dropna()


def questions_per_point(curves: Mapping[str, Curve], key: str) -> str:
    """'16' (every system alike), '16-32' (a range) or '' (unknown)."""
    counts = sorted({c.questions.get(key) for c in curves.values()} - {None})
    if not counts:
        return ""
    return str(counts[0]) if len(counts) == 1 else f"{counts[0]}-{counts[-1]}"


def write_curve_files(curves: Mapping[str, Curve], metrics: Sequence[CurveMetric], folder: Path) -> list[str]:
    """One CSV per metric under `folder` (replaced whole): step, system, questions, <key>.
    Long format, one line per system in `dvc plots`; the value is the last column, which
    DVC takes as y. Metrics no system logged get no file. Returns the file names."""
    written = []
    with atomic_dir(folder) as tmp:
        for metric in metrics:
            frames = []
            for system, curve in curves.items():
                points = curve.points(metric.key)
                if points.empty:
                    continue
                frames.append(pd.DataFrame({
                    "step": points["step"].astype(int).to_numpy(),
                    "system": system,
                    "questions": curve.questions.get(metric.key) or "",
                    metric.key: points[metric.key].to_numpy(),
                }))
            if frames:
                pd.concat(frames, ignore_index=True).to_csv(tmp / f"{metric.key}.csv", index=False)
                written.append(f"{metric.key}.csv")
    return written
