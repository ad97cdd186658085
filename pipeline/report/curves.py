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
from pipeline.systems import TRAINED


@dataclass(frozen=True)
class CurveMetric:
    key: str  # the MLflow metric key, logged per training step
    title: str  # what is plotted: the figure panel's and the `dvc plots` plot's title
    questions_param: str  # the training run's param: questions behind one point
    unit: str = ""  # the y axis label: what one value is


DEV, BATCH = "shared.dev_questions", "shared.questions_per_batch"
# role -> how some system trains it ("grpo", "opd"): the trainer logs a role's advantage
# diagnostics only for these (pipeline.rl.diagnostics), so only they are curves
_TRAINED_AS = {role: {s.roles[role].kind for s in TRAINED if role in s.roles} for role in ROLES}
CURVE_METRICS: tuple[CurveMetric, ...] = (
    CurveMetric("dev_em", "Dev exact match", DEV, "exact match, share of dev questions"),
    CurveMetric("dev_no_search_share", "Dev: answers given without any search", DEV,
                "share of dev trajectories"),
    CurveMetric("dev_searcher_kl", "Dev Searcher KL to the Stage-I Teacher (fixed contexts)", DEV,
                "KL, nats per token"),
    CurveMetric("dev_searcher_fidelity", "Dev Searcher fidelity: calls that kept a hop answer they read", DEV,
                "share of Searcher calls that read one"),
    CurveMetric("dev_searches_per_searcher_call", "Dev searches per Searcher call", DEV,
                "searches per Searcher call"),
    CurveMetric("no_search_share", "Training batch: answers given without any search", BATCH,
                "share of batch trajectories"),
    CurveMetric("searcher_kl_sampled", "Training Searcher KL to its Teacher (sampled tokens)", BATCH,
                "KL, nats per token"),
    *(metric for role in ROLES if "grpo" in _TRAINED_AS[role] for metric in (
        CurveMetric(f"zero_adv_groups_{role}", f"{role.capitalize()}: GRPO groups with zero advantage", BATCH,
                    "share of groups"),
        CurveMetric(f"tied_groups_{role}", f"{role.capitalize()}: GRPO groups tied on the outcome", BATCH,
                    "share of groups"))),
    *(CurveMetric(f"abs_adv_{role}_{kind}", f"{role.capitalize()}: mean |advantage| ({kind.upper()})", BATCH,
                  "mean |advantage| per loss token") for role in ROLES for kind in ("grpo", "opd")
      if kind in _TRAINED_AS[role]),
    CurveMetric("clip_fraction", "PPO clip fraction", BATCH, "share of loss tokens clipped"),
    CurveMetric("entropy", "Policy entropy on loss tokens", BATCH, "nats per token"),
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
    DVC takes as y. A metric no system logged gets a file with the header alone, so that each
    plot dvc.yaml names has its file (an empty plot, not an error). Returns the names of the
    files with data."""
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
            else:
                (tmp / f"{metric.key}.csv").write_text(f"step,system,questions,{metric.key}\n")
    return written
