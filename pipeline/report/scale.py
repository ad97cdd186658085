"""At what scale a report was made and what that scale can and cannot show, from the run's
own intervals: how wide they are, which gaps they resolve, how large a true gap must be to be
resolved in most runs, and how many test questions the paper's smallest published gap would
need at the same spread."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

import pandas as pd

from pipeline.report import published as pub
from pipeline.report.results import Results
from pipeline.systems import BY_NAME

PAPER_MODEL = "Qwen3-4B-Instruct-2507, about 4 billion parameters"


@dataclass(frozen=True)
class Scale:
    questions: int  # test questions per system
    datasets: int
    runs: int
    system_half_width: float | None  # median half-width of one system's macro avg@k interval (points)
    gap_half_width: float | None  # median half-width of the paired gap intervals (points)
    resolved: list[str]  # baselines whose gap interval excludes zero
    compared: list[str]  # baselines with a gap interval
    questions_needed: int | None  # to resolve the smallest published gap at this spread


def _label(system: str) -> str:
    return BY_NAME[system].label if system in BY_NAME else system


def detectable_gap(half_width: float, level: int, power: float) -> float:
    """The true gap whose interval excludes zero with probability `power` in one run whose
    intervals have this half-width (normal approximation: half-width = z x standard error)."""
    z = NormalDist().inv_cdf(0.5 + level / 200)
    return half_width * (z + NormalDist().inv_cdf(power)) / z


def measure_scale(results: Results, intervals: pd.DataFrame) -> Scale | None:
    """None when no system has evaluation records."""
    avg = intervals[intervals["measure"] == f"avg@{results.runs}"]
    if avg.empty:
        return None
    half = ((avg["high"] - avg["low"]) / 2).median()
    gaps = results.gaps
    gap_half = float(((gaps["high"] - gaps["low"]) / 2).median()) if len(gaps) else None
    resolved = [row.baseline for row in gaps.itertuples(index=False) if row.low > 0 or row.high < 0]
    questions = int(avg["questions"].max())
    spread = gap_half if gap_half is not None else float(half) * math.sqrt(2)  # unpaired: both vary
    smallest = min(diff for diff, _, _ in pub.GAPS.values())
    needed = math.ceil(questions * (spread / smallest) ** 2) if spread > 0 else None
    return Scale(questions, int(avg["datasets"].max()), results.runs, float(half), gap_half, resolved,
                 list(gaps["baseline"]), needed)


def dedup_sentence(dedup: Mapping[str, int] | None) -> str:
    """What dedup removed before the splits were drawn (data/splits/dedup_report.json's
    `removed`, pipeline.report.inputs.dedup_counts); empty without the report."""
    if dedup is None:
        return ""
    return (f"Before the test set was drawn, {dedup['test_equals_train']:,} test-pool questions were removed because "
            f"their normalised text equals a training question's, and {dedup['duplicate_in_split']:,} questions as "
            "duplicates of another question of their own dataset and split (data/splits/dedup_report.json).")


def scale_section(scale: Scale | None, profile: str, model: str, level: int, target: str,
                  dedup: Mapping[str, int] | None = None) -> str:
    """Markdown bullets placed beside the main table; `dedup`: the counts of dedup_sentence."""
    removed = dedup_sentence(dedup)
    if scale is None:
        return "No system has evaluation records, so this report shows no result at any scale." + (
            f"\n\n{removed}" if removed else "")
    smallest_name, (smallest, _, _) = min(pub.GAPS.items(), key=lambda item: item[1][0])
    published = ", ".join(f"{_label(target)} - {_label(b)} {d:.2f}" for b, (d, _, _) in pub.GAPS.items())
    resolution = scale.gap_half_width if scale.gap_half_width is not None else scale.system_half_width * math.sqrt(2)
    lines = [f"**Made at:** the `{profile}` profile: {scale.questions} test questions per system "
             f"({scale.datasets} datasets), {scale.runs} runs each; base model {model}; "
             f"the paper used {PAPER_MODEL}." + (f" {removed}" if removed else "")]
    if resolution == 0:  # every question scores the same, under any resampling
        lines += ["**Resolution:** none. Every question scores the same for every system, so resampling "
                  "never moves a macro score: the intervals have no width and measure nothing.",
                  f"**Can show:** no difference between systems. **Cannot show:** any difference between "
                  f"systems, nor the paper's gaps ({published} points)."]
        return "\n".join(f"- {line}" for line in lines)
    lines.append(f"**Resolution:** one system's macro avg@{scale.runs} is known to within "
                 f"±{scale.system_half_width:.1f} points (median half-width of its {level}% bootstrap interval)"
                 + (f"; a paired gap of {_label(target)} against a baseline to within ±{scale.gap_half_width:.1f} "
                    f"points (median over {len(scale.compared)} baselines)." if scale.gap_half_width is not None
                    else "."))
    testable = smallest >= resolution  # every published gap is larger than what this run resolves
    if scale.compared:
        named = ", ".join(_label(b) for b in scale.resolved) or "none"
        can = (f"**Can show:** gaps of more than about {resolution:.1f} points. Here "
               f"{len(scale.resolved)} of {len(scale.compared)} gaps of {_label(target)} exclude zero: {named}.")
    else:
        can = (f"**Can show:** differences between two systems of more than about {resolution:.1f} points "
               f"(no paired gaps: {_label(target)} or its baselines lack records).")
    if testable:
        can += (f" The paper's gaps ({published} points) are all larger than that, so this run can test the "
                "paper's ordering.")
    lines.append(can)
    cannot = f"**Cannot show:** gaps smaller than about {resolution:.1f} points."
    if testable:
        cannot += " None of the paper's gaps is that small."
    else:
        cannot += (f" The paper's gaps ({published} points) include smaller ones, so this run can neither confirm "
                   "nor refute the paper's ordering.")
        if scale.questions_needed:
            cannot += (f" At this spread, resolving the smallest ({smallest:.2f} points, vs {_label(smallest_name)}) "
                       f"needs about {scale.questions_needed:,} test questions per system (intervals narrow as "
                       "1/sqrt(n)).")
    lines.append(cannot)
    lines.append(f"**Power:** a true gap of about {resolution:.1f} points excludes zero in about half of the "
                 f"runs of this size; one of about {detectable_gap(resolution, level, 0.8):.1f} points in 4 runs "
                 f"of 5, and in both of two independent runs (80% chance) from about "
                 f"{detectable_gap(resolution, level, math.sqrt(0.8)):.1f} points (normal approximation).")
    return "\n".join(f"- {line}" for line in lines)
