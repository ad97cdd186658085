"""What `dvc metrics show` and `dvc plots show` read, besides the curves.

- `reports/<profile>/metrics/<system>.json`: one small file per system, so `dvc metrics
  show` prints one row per system: macro avg@k with its interval, pass@k, all@k, the paired
  gap target - system with its interval, and the funnel's role-level rates.
- `reports/<profile>/plots/`: the macro table (`macro.csv`) and the paired gaps
  (`gaps.csv`) as intervals, both with the columns system, measure, low, high, value;
  dvc.yaml draws every file of the folder with one template.
"""

from __future__ import annotations

import math
from pathlib import Path

import pandas as pd

from pipeline.io import atomic_dir
from pipeline.report.points import Points
from pipeline.report.results import Results

PLOT_COLUMNS = ["system", "measure", "low", "high", "value"]  # the value last: DVC's default y


def _num(value: float) -> float | None:
    return None if value is None or math.isnan(value) else round(float(value), 2) + 0.0  # no -0.0


def headline(results: Results, intervals: pd.DataFrame) -> dict[str, dict[str, float | None]]:
    k = results.runs
    table = intervals.set_index(["system", "measure"])
    gaps = results.gaps.set_index("baseline") if len(results.gaps) else None
    out = {}
    for system in results.present:
        avg = table.loc[(system, f"avg@{k}")]
        row = {f"avg@{k}": _num(avg["value"]), f"avg@{k}_low": _num(avg["low"]), f"avg@{k}_high": _num(avg["high"]),
               f"pass@{k}": _num(table.loc[(system, f"pass@{k}"), "value"]),
               f"all@{k}": _num(table.loc[(system, f"all@{k}"), "value"])}
        if gaps is not None and system in gaps.index:
            gap = gaps.loc[system]
            row.update({"gap": _num(gap["diff"]), "gap_low": _num(gap["low"]), "gap_high": _num(gap["high"])})
        out[system] = row
    return out


def write_metric_files(results: Results, intervals: pd.DataFrame, folder: Path, points: Points | None = None) -> None:
    """One file per system: the headline, and where its records have the funnel, the Searcher's
    fidelity, searches per Searcher call and the Answerer's accuracy on what it was handed."""
    import json

    with atomic_dir(folder) as tmp:
        for system, row in headline(results, intervals).items():
            if points is not None and system in points.systems:
                row.update({r.key: _num(points.rate(system, r.key)) for r in points.rates()})
            (tmp / f"{system}.json").write_text(json.dumps(row, indent=2) + "\n")


def write_plot_files(results: Results, intervals: pd.DataFrame, target_label: str, folder: Path) -> None:
    """The folder is replaced whole; a table without rows gets no file."""
    k = results.runs
    gaps = pd.DataFrame({"system": results.gaps["baseline"], "measure": f"{target_label} - system, avg@{k}",
                         "low": results.gaps["low"], "high": results.gaps["high"], "value": results.gaps["diff"]})
    with atomic_dir(folder) as tmp:
        for name, frame in (("macro", intervals), ("gaps", gaps)):
            if len(frame):
                frame[PLOT_COLUMNS].round(4).to_csv(tmp / f"{name}.csv", index=False)
