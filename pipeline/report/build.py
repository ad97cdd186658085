"""Build the whole report: metrics.json, paper.md/html, main_table.tex, figures, curves."""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Params
from pipeline.io import atomic_dir, write_json, write_text
from pipeline.report import figures
from pipeline.report.inputs import load_records, model_summary, split_sizes
from pipeline.report.metrics_json import metrics_dict
from pipeline.report.mlflow_runs import CURVE_METRICS, read_mlflow
from pipeline.report.paper import Provenance, build_markdown, to_html
from pipeline.report.results import Results, compute_results
from pipeline.report.tables import latex_main_table
from pipeline.systems import SYSTEMS
from pipeline.tracking import git_commit


@dataclass
class ReportOutput:
    results: Results
    metrics: dict
    folder: Path  # reports/<profile>
    metrics_path: Path
    runs_used: int
    curves: list[str]
    seconds: float


def build_report(params: Params, root: Path) -> ReportOutput:
    start = time.perf_counter()
    ev = params.common.eval
    loaded = load_records(root)
    results = compute_results(loaded.records, loaded.present, loaded.missing, ev.target_system, ev.runs,
                              ev.bootstrap_draws, ev.bootstrap_seed, ev.confidence)
    curves, runs = read_mlflow(params.profile, root)
    folder = root / "reports" / params.profile

    with atomic_dir(folder / "curves") as tmp:
        for system, curve in curves.items():
            curve[["step", *CURVE_METRICS]].to_csv(tmp / f"{system}.csv", index=False)
    figure_names = []
    with atomic_dir(folder / "figures") as tmp:
        if curves:
            figures.training_dynamics(curves, tmp / "training_dynamics.png")
            figure_names.append("figures/training_dynamics.png")
        if results.present:
            ours = {s: results.value("macro", s, f"avg@{ev.runs}") for s in results.present}
            figures.macro_bars(ours, {s.name: s.published_avg4 for s in SYSTEMS}, params.profile,
                               tmp / "macro_avg4.png")
            figure_names.append("figures/macro_avg4.png")

    prov = Provenance(
        profile=params.profile, git_commit=git_commit(root), data_source=params.data.source,
        split_sizes=split_sizes(root), model=model_summary(root),
        protocol={"runs": ev.runs, "bootstrap_draws": ev.bootstrap_draws, "bootstrap_seed": ev.bootstrap_seed,
                  "confidence": ev.confidence, "target_system": ev.target_system},
        runs=runs, figures=figure_names, curves=list(curves),
    )
    md = build_markdown(results, prov)
    write_text(folder / "paper.md", md)
    write_text(folder / "paper.html", to_html(md, f"MultiAgent-OPD report ({params.profile})"))
    write_text(folder / "main_table.tex", latex_main_table(results, params.profile))
    metrics = metrics_dict(results, params.profile)
    metrics_path = root / "reports" / "metrics.json"
    write_json(metrics_path, metrics)
    return ReportOutput(results, metrics, folder, metrics_path, len(runs), list(curves),
                        time.perf_counter() - start)
