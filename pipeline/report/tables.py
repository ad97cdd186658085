"""The report's tables as row lists, rendered to Markdown or LaTeX."""

from __future__ import annotations

import math
from collections.abc import Sequence

from pipeline.domain import DATASETS
from pipeline.report import published as pub
from pipeline.report.results import Results
from pipeline.systems import ABLATIONS, BY_NAME, SYSTEMS

DATASET_LABELS = {"nq": "NQ", "triviaqa": "TriviaQA", "popqa": "PopQA", "hotpotqa": "HotpotQA",
                  "2wiki": "2Wiki", "musique": "MuSiQue", "bamboogle": "Bamboogle"}
NOT_EVALUATED = "not evaluated"
Table = tuple[list[str], list[list[str]]]


def fmt(value: float | None, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return f"{value:.{digits}f}"


def fmt_gap(diff: float, low: float, high: float) -> str:
    return f"{diff:+.2f} [{low:.2f}, {high:.2f}]"


def markdown(table: Table) -> str:
    headers, rows = table
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def _label(system: str) -> str:
    return BY_NAME[system].label


def datasets_of(results: Results) -> list[str]:
    present = set(results.per_dataset["dataset"]) if len(results.per_dataset) else set()
    return [d for d in DATASETS if d in present] + sorted(present - set(DATASETS))


def main_table(results: Results, profile: str) -> Table:
    k = results.runs
    headers = ["system", f"ours ({profile}) macro avg@{k}", f"ours ({profile}) macro pass@{k}",
               f"{pub.LABEL} macro avg@4", f"{pub.LABEL} macro pass@4"]
    rows = []
    for s in SYSTEMS:
        if s.name in results.present:
            ours = [fmt(results.value("macro", s.name, f"avg@{k}")), fmt(results.value("macro", s.name, f"pass@{k}"))]
        else:
            ours = [NOT_EVALUATED, NOT_EVALUATED]
        rows.append([s.label, *ours, fmt(s.published_avg4), fmt(s.published_pass4)])
    for name, (avg4, pass4) in pub.EXTERNAL.items():
        rows.append([f"{name} (external, published only)", "-", "-", fmt(avg4), fmt(pass4)])
    return headers, rows


def per_dataset_table(results: Results, metric: str) -> Table:
    datasets = datasets_of(results)
    headers = ["system", *(DATASET_LABELS.get(d, d) for d in datasets), "macro"]
    frame = results.per_dataset.set_index(["system", "dataset"]) if len(results.per_dataset) else None
    rows = []
    for system in results.present:
        cells = [fmt(float(frame.loc[(system, d), metric])) if (system, d) in frame.index else "-" for d in datasets]
        rows.append([_label(system), *cells, fmt(results.value("macro", system, metric))])
    return headers, rows


def published_dataset_points() -> str:
    return "; ".join(f"{_label(s)} on {DATASET_LABELS[d]}: {v:.1f}" for (s, d), v in pub.DATASET_AVG4.items())


def all_table(results: Results) -> Table:
    k = results.runs
    headers = ["system", f"ours all@{k}", f"{pub.LABEL} all@4"]
    rows = [[_label(s), fmt(results.value("macro", s, f"all@{k}")), fmt(pub.ALL4.get(s))] for s in results.present]
    return headers, rows


def gap_table(results: Results, repair: bool) -> Table:
    frame = results.repair if repair else results.gaps
    published = pub.PERFECT_REPAIR if repair else pub.GAPS
    headers = ["gap (macro avg@4, points)", "ours: diff [95% interval]", f"{pub.LABEL}"]
    rows = []
    for row in frame.itertuples(index=False):
        ref = published.get(row.baseline)
        rows.append([f"{_label(row.target)} - {_label(row.baseline)}", fmt_gap(row.diff, row.low, row.high),
                     fmt_gap(*ref) if ref else "-"])
    return headers, rows


def ablation_table(results: Results) -> Table:
    k = results.runs
    names = [results.target] + [s.name for s in SYSTEMS if s.name in ABLATIONS]
    headers = ["system", f"macro avg@{k}", f"macro pass@{k}", f"macro all@{k}", "no-search share (%)",
               "searches / workflow", f"{pub.LABEL} avg@4"]
    rows = []
    for name in names:
        if name not in results.present:
            rows.append([_label(name), NOT_EVALUATED, "", "", "", "", fmt(BY_NAME[name].published_avg4)])
            continue
        rows.append([_label(name), fmt(results.value("macro", name, f"avg@{k}")),
                     fmt(results.value("macro", name, f"pass@{k}")), fmt(results.value("macro", name, f"all@{k}")),
                     fmt(results.value("behaviour", name, "no_search_share")),
                     fmt(results.value("workload", name, "search_actions")), fmt(BY_NAME[name].published_avg4)])
    return headers, rows


def workload_table(results: Results) -> Table:
    headers = ["system", "workflows", "search actions", "input tokens", "output tokens",
               f"{pub.LABEL} searches / input / output"]
    rows = []
    for s in results.present:
        ref = pub.WORKLOAD.get(s)
        rows.append([_label(s), fmt(results.value("workload", s, "n_workflows"), 0),
                     fmt(results.value("workload", s, "search_actions")),
                     fmt(results.value("workload", s, "input_tokens"), 0),
                     fmt(results.value("workload", s, "output_tokens"), 0),
                     " / ".join(fmt(v, 2 if i == 0 else 0) for i, v in enumerate(ref)) if ref else "-"])
    return headers, rows


def behaviour_table(results: Results) -> Table:
    k = results.runs
    headers = ["system", "no search (%)", "subtask + report (%)", "final answer (%)", "forced answer (%)",
               "format failure, macro (%)", "rescued by flexible", f"flexible macro avg@{k} (diagnostic)"]
    rows = []
    for s in results.present:
        b = lambda c, s=s: results.value("behaviour", s, c)  # noqa: E731
        rows.append([_label(s), fmt(b("no_search_share")), fmt(b("subtask_and_report_share")),
                     fmt(b("final_answer_share")), fmt(b("forced_answer_share")),
                     fmt(b("format_failure_rate_macro")), fmt(b("rescued_by_flexible"), 0),
                     fmt(results.value("flexible_macro", s, f"avg@{k}"))])
    return headers, rows


def published_behaviour_note() -> str:
    o = pub.OUTCOME_RL_BEHAVIOUR
    return (f"{pub.LABEL}: MultiAgent-OPD format-failure rate {pub.FORMAT_FAILURE_MACRO['multiagent_opd']:.2f}%, "
            f"{pub.RESCUED_BY_FLEXIBLE['multiagent_opd']} answers rescued by flexible extraction; outcome-RL "
            f"Searcher ablation: {o['no_search_share']:.0f}% of workflows without search, "
            f"{o['subtask_and_report_share']:.2f}% with subtasks and reports, {o['final_answer_share']:.2f}% "
            f"with a final answer.")


def _tex(text: str) -> str:
    """Escape the LaTeX special characters that labels and numbers may hold."""
    text = text.replace("\\", r"\textbackslash{}")
    for char in "&%_#$":
        text = text.replace(char, "\\" + char)
    return text


def latex_main_table(results: Results, profile: str) -> str:
    """Booktabs LaTeX of the main table (ours beside published)."""
    _, rows = main_table(results, profile)
    k = results.runs
    lines = [
        r"\begin{table}[t]", r"\centering", r"\small",
        r"\begin{tabular}{lrrrr}", r"\toprule",
        rf" & \multicolumn{{2}}{{c}}{{ours ({_tex(profile)})}}"
        r" & \multicolumn{2}{c}{published (Qwen3-4B, paper)} \\",
        r"\cmidrule(lr){2-3}\cmidrule(lr){4-5}",
        rf"System & avg@{k} & pass@{k} & avg@4 & pass@4 \\", r"\midrule",
    ]
    lines += [" & ".join(_tex(c) for c in row) + r" \\" for row in rows]
    lines += [r"\bottomrule", r"\end{tabular}",
              rf"\caption{{Macro avg@{k} and pass@{k} over the seven datasets (strict extraction, %).}}",
              r"\label{tab:main}", r"\end{table}", ""]
    return "\n".join(lines)


def md_list(items: Sequence[str]) -> str:
    return "\n".join(f"- {item}" for item in items)
