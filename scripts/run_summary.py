"""One full run's figures, as the results table and the Stage-II diagnostics quote them.

Reads what `make repro` leaves in a checkout: `data/timings.jsonl` (stage time and peak RSS; absent
in a fresh clone, whose committed report is still summarised) and the report of the profile
(`reports/metrics.json`, `reports/<profile>/draw.json`, `reports/<profile>/curves/`). Prints:
stage time and peak RSS, the paper's seven comparisons beside its values (unrounded in draw.json,
so printed as the report prints them),
each system's forced-answer share, the dev Searcher KL to the Teacher at every curve point, the
tied and zero-advantage group shares per role (mean over steps), where the points go (each
system's Searcher fidelity, searches per Searcher call, the Answerer's accuracy on what it was
handed, and the role-level paired gaps), and the row for
docs/results.md's table. It computes nothing new: every figure is the run's own.
Run from the repo root:
    python scripts/run_summary.py [--root DIR]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import pandas as pd

from pipeline.draws.record import read_draw_report
from pipeline.draws.workspace import stage_times
from pipeline.errors import InputError
from pipeline.report.comparisons import published_gap
from pipeline.systems import BY_NAME, SYSTEMS, TEACHER

ROLES = ("leader", "searcher", "answerer")
STAGE_ONE = (TEACHER, "c_mas_base")
NO_SUPERVISION = "ablation_no_searcher_supervision"
RSS_LIMIT_MB = 4096  # the project's per-stage memory bound for the tiny profile
# the columns of docs/results.md's table this script fills, after the run's own description
ROW_GAPS = (STAGE_ONE, ("multiagent_opd", "h_mas_base"), ("multiagent_opd", "prompted_critic"),
            ("multiagent_opd", NO_SUPERVISION))


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except OSError as err:
        raise InputError(f"{path}: cannot read ({err.strerror}); run `make repro` first") from None
    except json.JSONDecodeError as err:
        raise InputError(f"{path}, line {err.lineno}: not valid JSON") from None


def gaps(record: dict) -> dict[tuple[str, str], tuple[float, float, float]]:
    """(target, baseline) -> (diff, low, high) for every comparison of the run's draw record that
    the report measured (a pair without records has nulls and is left out)."""
    return {(c["target"], c["baseline"]): (c["diff"], c["low"], c["high"])
            for c in record["comparisons"].values() if c["diff"] is not None}


def curve(folder: Path, metric: str) -> pd.DataFrame | None:
    path = folder / f"{metric}.csv"
    if not path.exists():
        return None
    frame = pd.read_csv(path)
    if not {"step", "system", metric} <= set(frame.columns):
        raise InputError(f"{path}: expected the columns step, system and {metric}")
    return frame


def _in_registry_order(systems) -> list[str]:
    present = set(systems)
    return [s.name for s in SYSTEMS if s.name in present]


def _gap_text(gap: tuple[float, float, float]) -> str:
    return f"{gap[0]:+.2f} [{gap[1]:.2f}, {gap[2]:.2f}]"


def role_lines(metrics: dict, record: dict) -> list[str]:
    """Where the points go: each system's Searcher fidelity, searches per Searcher call and the
    Answerer's accuracy on what it was handed, and the role-level paired gaps (the report's own)."""
    funnel = record.get("funnel")
    if not funnel:
        return ["Where the points go: not measured (the evaluation records predate the funnel)"]
    lines = ["Where the points go (Searcher fidelity % / searches per Searcher call / Answerer on what it was "
             "handed %):"]
    for system in _in_registry_order(funnel["rates"]):
        rates = funnel["rates"][system]
        cells = [("-" if rates.get(k) is None else f"{rates[k]:.{d}f}")
                 for k, d in (("searcher_fidelity", 1), ("searches_per_searcher_call", 2),
                              ("answerer_accuracy_given_handed", 1))]
        lines.append(f"  {BY_NAME[system].label}: " + " / ".join(cells))
    lines.append("Role-level gaps, paired 95% (Searcher fidelity points; Answerer on what it was handed points):")
    for key, entry in funnel["comparisons"].items():
        target, baseline = next((s.name, b.name) for s in SYSTEMS for b in SYSTEMS if f"{s.name}-{b.name}" == key)
        cells = [("not measured" if entry.get(k) is None else
                  _gap_text((entry[k]["diff"], entry[k]["low"], entry[k]["high"])))
                 for k in ("searcher_fidelity", "answerer_accuracy_given_handed")]
        lines.append(f"  {BY_NAME[target].label} - {BY_NAME[baseline].label}: " + "; ".join(cells))
    return lines


def summary(root: Path, profile: str | None = None) -> list[str]:
    """The summary's lines; `profile` defaults to the report's (reports/metrics.json)."""
    metrics = _read_json(root / "reports" / "metrics.json")
    profile = profile or metrics["profile"]
    record = read_draw_report(root / "reports" / profile / "draw.json", profile)
    curves = root / "reports" / profile / "curves"
    lines = [f"Run of {root.resolve()} (profile {profile})"]

    times = stage_times(root, profile)
    stage_min = rss = "-"
    if times is None:
        lines.append("Stage time: no data/timings.jsonl here (make repro writes it)")
    else:
        heaviest = max(times, key=lambda s: times[s]["peak_rss_mb"])
        stage_min = f"{sum(t['seconds'] for t in times.values()) / 60:.1f}"
        rss = f"{times[heaviest]['peak_rss_mb']:,.0f} MB"
        over = [s for s, t in times.items() if t["peak_rss_mb"] >= RSS_LIMIT_MB]
        limit = f"over {RSS_LIMIT_MB} MB: {', '.join(over)}" if over else f"every stage under {RSS_LIMIT_MB} MB"
        lines.append(f"Stage time: {len(times)} stages, {stage_min} min; peak RSS {rss} ({heaviest}); {limit}")

    measured = gaps(record)
    lines.append("Gaps, macro avg@4 with the paired 95% interval (paper beside):")
    order = [s.name for s in SYSTEMS]
    for (target, baseline), gap in sorted(measured.items(), key=lambda kv: (kv[0] != STAGE_ONE, order.index(kv[0][1]))):
        lines.append(f"  {BY_NAME[target].label} - {BY_NAME[baseline].label}: {_gap_text(gap)}  "
                     f"(paper {published_gap(target, baseline)[0]:+.2f})")

    forced = [f"{BY_NAME[s].label} {metrics['systems'][s]['behaviour']['forced_answer_share']:.2f}"
              for s in _in_registry_order(metrics["systems"])]
    lines.append("Forced answers (% of workflows): " + ", ".join(forced))

    lines += role_lines(metrics, record)

    kl = curve(curves, "dev_searcher_kl")
    kl_end = "-"
    if kl is not None:
        lines.append("Dev Searcher KL to the Teacher, by step:")
        for system in _in_registry_order(kl["system"].unique()):
            rows = kl[kl["system"] == system].sort_values("step")
            points = ", ".join(f"{int(r.step)} {r.dev_searcher_kl:.4f}" for r in rows.itertuples())
            lines.append(f"  {BY_NAME[system].label}: {points}")
        opd = kl[kl["system"] == metrics["target_system"]].sort_values("step")
        no_supervision = kl[kl["system"] == NO_SUPERVISION].sort_values("step")
        if len(opd):
            kl_end = (f"{opd.dev_searcher_kl.iloc[0]:.4f} -> {opd.dev_searcher_kl.iloc[-1]:.4f}"
                      + (f" ({no_supervision.dev_searcher_kl.iloc[-1]:.4f})" if len(no_supervision) else ""))

    lines.append("Groups tied on the outcome / with zero advantage, mean share over steps:")
    for role in ROLES:
        tied, zero = curve(curves, f"tied_groups_{role}"), curve(curves, f"zero_adv_groups_{role}")
        if tied is None or zero is None:
            continue
        tied_mean = tied.groupby("system")[f"tied_groups_{role}"].mean()
        zero_mean = zero.groupby("system")[f"zero_adv_groups_{role}"].mean()
        shares = [f"{BY_NAME[s].label} {tied_mean[s]:.2f} / {zero_mean.get(s, float('nan')):.2f}"
                  for s in _in_registry_order(tied_mean.index)]
        lines.append(f"  {role}: " + ", ".join(shares))

    cells = [stage_min, rss, *(_gap_text(measured[pair]) if pair in measured else "-" for pair in ROW_GAPS), kl_end]
    lines.append("docs/results.md row (stage min | peak RSS | Teacher - C-MAS base | OPD - H-MAS base | "
                 "OPD - Prompted Critic | OPD - no Searcher sup. | OPD Searcher KL):")
    lines.append("  | " + " | ".join(cells) + " |")
    return lines


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path("."))
    parser.add_argument("--profile", default=None, help="the report's profile (default: reports/metrics.json's)")
    args = parser.parse_args(argv)
    print("\n".join(summary(args.root, args.profile)))


if __name__ == "__main__":
    try:
        main(sys.argv[1:])
    except InputError as err:
        sys.exit(f"error: {err}")
