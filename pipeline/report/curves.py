"""Training curves: which per-step metrics the report draws, the file each training stage writes
them to, and the report's files for `dvc plots`.

A curve metric names the metric the trainer logs per step and the training param that says how
many questions stand behind one point. Each `train@<system>` stage writes the curves of its run
to data/curves/<system>.csv (`write_stage_curves`), a DVC output beside its model: the report
reads curves from those files only (`read_stage_curves`), never from MLflow, which mirrors them.
Adding a diagnostic to the report is one more `CurveMetric` in `CURVE_METRICS`: the figure gets
a panel and `reports/<profile>/curves/` a file, which dvc.yaml's `plots:` picks up as a plot.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeline.domain import ROLES
from pipeline.errors import InputError
from pipeline.io import atomic_dir, atomic_path
from pipeline.systems import TRAINED


@dataclass(frozen=True)
class CurveMetric:
    key: str  # the metric key the trainer logs per training step (and MLflow mirrors)
    title: str  # what is plotted: the figure panel's and the `dvc plots` plot's title
    questions_param: str  # the training param (`<section>.<key>` of train.shared) behind one point
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


# --------------------------------------------------------------------------- a training stage's curves file

CURVES_DIR = Path("data") / "curves"
STAGE_COLUMNS = ("step", "metric", "value", "questions")


def stage_curves_path(root: Path, system: str) -> Path:
    """data/curves/<system>.csv: the curves of `train@<system>`, a DVC output of that stage."""
    return Path(root) / CURVES_DIR / f"{system}.csv"


def write_stage_curves(path: Path, history: Sequence[Mapping[str, float]], questions: Mapping[str, int | None],
                       metrics: Sequence[CurveMetric] = CURVE_METRICS) -> int:
    """The points of `history` ({"step": s, **metrics}, as the trainer logged them: a resumed
    run's checkpoint history, then its own) for each of `metrics`, long format, one row per
    (step, metric) in step then `metrics` order, the last value of a step that was logged twice;
    `questions`: questions behind one point, by metric key. Written atomically; returns the rows."""
    latest: dict[tuple[int, str], float] = {}
    keys = {m.key for m in metrics}
    for point in history:
        step = int(point["step"])
        for key, value in point.items():
            if key in keys:
                latest[(step, key)] = float(value)
    order = {m.key: i for i, m in enumerate(metrics)}
    rows = sorted(latest, key=lambda sk: (sk[0], order[sk[1]]))
    frame = pd.DataFrame({
        "step": [s for s, _ in rows], "metric": [k for _, k in rows],
        "value": [latest[r] for r in rows],
        "questions": pd.array([questions.get(k) for _, k in rows], dtype="Int64"),
    }, columns=list(STAGE_COLUMNS))
    with atomic_path(path) as tmp:
        frame.to_csv(tmp, index=False, float_format="%.17g")
    return len(frame)


def read_stage_curves(path: Path, system: str, run_id: str = "",
                      metrics: Sequence[CurveMetric] = CURVE_METRICS) -> Curve:
    """A `write_stage_curves` file as a Curve (one column per metric of `metrics` it holds);
    InputError naming the file and what is wrong otherwise."""
    try:
        frame = pd.read_csv(path)
    except (OSError, ValueError) as err:
        raise InputError(f"{path}: cannot read the training curves ({err}); the `train@{system}` stage writes "
                         "them, re-run it") from None
    missing = [c for c in STAGE_COLUMNS if c not in frame.columns]
    if missing:
        raise InputError(f"{path}: columns {missing} missing; expected {list(STAGE_COLUMNS)} "
                         f"(the `train@{system}` stage's curves)")
    known = {m.key for m in metrics}
    frame = frame[frame["metric"].isin(known)]
    if frame["step"].isna().any() or frame["value"].isna().any():
        line = int(frame.index[frame["step"].isna() | frame["value"].isna()][0]) + 2
        raise InputError(f"{path}, line {line}: step and value must be numbers")
    wide = (frame.pivot_table(index="step", columns="metric", values="value", aggfunc="last")
            .sort_index().rename_axis(None, axis=1).reset_index())
    wide["step"] = wide["step"].astype(int)
    wide = wide[["step", *[m.key for m in metrics if m.key in wide.columns]]]
    questions = {}
    for key, group in frame.groupby("metric"):
        values = group["questions"].dropna().unique()
        questions[key] = int(values[0]) if len(values) else None
    return Curve(system, run_id, wide, questions)
