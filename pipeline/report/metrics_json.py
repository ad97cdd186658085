"""reports/metrics.json: the computed numbers, nested so `dvc metrics show` prints readable keys
(systems.multiagent_opd.macro.avg@4, gaps.vs_c_mas_rl.low, ...)."""

from __future__ import annotations

import math
from typing import Any

from pipeline.eval.funnel_metrics import STEPS
from pipeline.eval.stated_reads import MISSES, STATED_RATES
from pipeline.report.points import Points
from pipeline.report.results import Results

WORKLOAD_KEYS = ("search_actions", "input_tokens", "output_tokens")
ROLE_KEYS = ("searcher_fidelity", "searches_per_searcher_call", "answerer_accuracy_given_handed",
             "searcher_calls_per_workflow", "leader_waves_per_workflow", "bridge_share")
# facts read per kind of question (pipeline.eval.stated_reads.reads_table), `<category>_<key>` in percent
READS_KEYS = ("read", "stated", "fidelity_stated", *MISSES, "hops_retrieved", "hops_stated")
BEHAVIOUR_KEYS = ("no_search_share", "subtask_and_report_share", "final_answer_share", "forced_answer_share",
                  "format_failure_rate_macro", "format_failure_rate_pooled", "rescued_by_flexible")


def _num(value: Any) -> float | int | None:
    if value is None:
        return None
    value = float(value)
    if math.isnan(value):
        return None
    return round(value, 4)


def _row(frame, system: str) -> dict[str, Any]:
    rows = frame[frame["system"] == system]
    return {} if rows.empty else rows.iloc[0].to_dict()


def metrics_dict(results: Results, profile: str, points: Points | None = None) -> dict[str, Any]:
    k = results.runs
    keys = (f"avg@{k}", f"pass@{k}", f"all@{k}")
    systems: dict[str, Any] = {}
    for system in results.present:
        macro, flexible = _row(results.macro, system), _row(results.flexible_macro, system)
        datasets = results.per_dataset[results.per_dataset["system"] == system]
        wl, bh = _row(results.workload, system), _row(results.behaviour, system)
        systems[system] = {
            "macro": {**{key: _num(macro[key]) for key in keys}, f"flexible_avg@{k}": _num(flexible[f"avg@{k}"])},
            "datasets": {row["dataset"]: {**{key: _num(row[key]) for key in keys},
                                          "n_questions": int(row["n_questions"])}
                         for _, row in datasets.iterrows()},
            "workload": {key: _num(wl[key]) for key in WORKLOAD_KEYS},
            "behaviour": {key: _num(bh[key]) for key in BEHAVIOUR_KEYS},
        }
        if points is not None and system in points.systems:
            systems[system]["funnel"] = funnel_figures(points, system)

    def gaps(frame) -> dict[str, Any]:
        return {f"vs_{row.baseline}": {"diff": _num(row.diff), "low": _num(row.low), "high": _num(row.high)}
                for row in frame.itertuples(index=False)}

    return {
        "profile": profile,
        "target_system": results.target,
        "systems_evaluated": len(results.present),
        "systems_missing": ", ".join(results.missing),
        "systems": systems,
        "gaps": gaps(results.gaps),
        "perfect_repair": gaps(results.repair),
        **({"funnel_gaps": {key: {rate: None if gap is None else {n: _num(v) for n, v in gap.items()}
                                  for rate, gap in entry.items()} for key, entry in points.gaps.items()}}
           if points is not None and points.systems else {}),
    }


def funnel_figures(points: Points, system: str) -> dict[str, float | None]:
    """One system's role-level rates and, per kind of question, the share of its workflows at each
    step of the funnel (`<category>_<step>`, percent)."""
    out: dict[str, float | None] = {key: _num(points.rate(system, key)) for key in ROLE_KEYS}
    for row in points.table[points.table["system"] == system].to_dict("records"):
        out.update({f"{row['category']}_{step}": _num(row[step]) for step in STEPS})
    if system in points.stated:
        out.update({r.key: _num(points.rate(system, r.key)) for r in STATED_RATES})
        for row in points.reads[points.reads["system"] == system].to_dict("records"):
            out.update({f"{row['category']}_{key}": _num(row[key]) for key in READS_KEYS})
    return out
