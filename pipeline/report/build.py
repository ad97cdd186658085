"""Build the whole report: metrics.json, paper.md/html, main_table.tex, figures, curves, and the
files `dvc metrics show` and `dvc plots show` read."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from pipeline.config import Params
from pipeline.draws.record import draw_record
from pipeline.eval.funnel_metrics import CATEGORIES as FUNNEL_CATEGORIES
from pipeline.io import atomic_dir, hash_files, write_json, write_text
from pipeline.provenance import git_commit
from pipeline.report import comparisons as cmp
from pipeline.report import figures
from pipeline.report import published as pub
from pipeline.report.across_draws import DRAWS_FIGURE, across_draws_section, draw_rows, draws_figure, load_draws
from pipeline.report.curves import CURVE_METRICS, read_stage_curves, stage_curves_path, write_curve_files
from pipeline.report.departures import departures
from pipeline.report.dvc_files import write_metric_files, write_plot_files
from pipeline.report.inputs import dedup_counts, load_records, model_summary, split_sizes
from pipeline.report.intervals import macro_intervals
from pipeline.report.metrics_json import metrics_dict
from pipeline.report.paper import Provenance, build_markdown, to_html
from pipeline.report.points import FIGURE as FUNNEL_FIGURE
from pipeline.report.points import measure_points, points_section, record_entry
from pipeline.report.results import Results, compute_results
from pipeline.report.scale import measure_scale, scale_section
from pipeline.report.tables import latex_main_table, markdown
from pipeline.systems import BY_NAME, SYSTEMS, TRAINED
from pipeline.tracking.runs import experiment_name
from pipeline.tracking.stage_record import StageRecord, joint_identity, read_records


@dataclass
class ReportOutput:
    results: Results
    metrics: dict
    folder: Path  # reports/<profile>
    metrics_path: Path
    records: int  # stage records read (data/runs/)
    curves: list[str]
    figures: list[str]  # relative to `folder`
    seconds: float


def _model_text(model: dict) -> str:
    size = f" with {model['parameters']:,} parameters" if model.get("parameters") else ""
    return f"{model.get('model_type', 'model')}{size} (`{model.get('folder')}`)"


# Great Expectations Data Docs beside the report (dvc.yaml outputs of validate_splits and
# validate_masks). Linked whether or not they are here: in a Prefect run the report is built
# in its own workspace, and the pages meet it in the run's checkout.
DATA_DOCS = ("splits", "masks")


def data_docs() -> list[str]:
    return [f"data_docs/{name}/index.html" for name in DATA_DOCS]


def comparisons_section(results: Results, gaps: list[cmp.Gap], curves, ev) -> str:
    """The paper's comparisons at this scale (`gaps`: comparisons.measure_gaps): gaps with
    intervals and verdicts, the search collapse, and the Searcher's KL to the Teacher."""
    level = int(round(ev.confidence * 100))
    no_search = (results.value("behaviour", "ablation_outcome_rl_searcher", "no_search_share")
                 if "ablation_outcome_rl_searcher" in results.present else None)
    kl_table, kl_sentence = cmp.searcher_kl(curves)
    parts = [markdown(cmp.gaps_table(gaps, level)),
             f"Macro avg@{ev.runs} gaps, paired bootstrap ({ev.bootstrap_draws} draws). The Prompted Critic "
             "trains its Leader and Answerer exactly as MultiAgent-OPD does (KL to the Stage-I Teacher "
             "included), so the two differ only in the Searcher's signal.",
             "**Search collapse.** " + cmp.search_collapse(curves, no_search),
             "**Searcher KL to the Teacher** (token mean over the generated positions of fixed dev Searcher "
             "contexts, the Stage-I Teacher's own calls, for every Stage-II system):"]
    if kl_table[1]:
        parts.append(markdown(kl_table))
    parts.append(kl_sentence)
    return "\n\n".join(parts)


DRAW_FILE = "draw.json"  # this run's draw record, beside paper.md


def read_curves(root: Path, records: dict[str, StageRecord]) -> dict:
    """{system: Curve} of every trained system whose stage wrote data/curves/<system>.csv, in
    pipeline.systems order, each with the id of the run that made it."""
    curves = {}
    for s in TRAINED:
        path = stage_curves_path(root, s.name)
        if path.is_file():
            record = records.get(s.train_stage)
            curves[s.name] = read_stage_curves(path, s.name, record.run_id if record else "")
    return curves


def content_hashes(root: Path, present: Sequence[str]) -> dict[str, dict[str, str]]:
    """sha256 of the models (pipeline.eval.run.model_fingerprint) and of the evaluation records
    the report's numbers came from: every present system's records and weights, and the base model."""
    from pipeline.eval.run import model_fingerprint

    weights = {"base", *(BY_NAME[s].weights for s in present)}
    models = {w: model_fingerprint(root / "data" / "models" / w) for w in sorted(weights)
              if (root / "data" / "models" / w).is_dir()}
    records = {s: hash_files(root / "data" / "eval" / s, ["records.parquet"]) for s in present}
    return {"models": models, "records": records}


def build_report(params: Params, root: Path, stages: Sequence[str] = ()) -> ReportOutput:
    """The whole report; `stages`: every stage of the DAG, each linked to its MLflow run."""
    start = time.perf_counter()
    ev = params.common.eval
    level = int(round(ev.confidence * 100))
    loaded = load_records(root)
    results = compute_results(loaded.records, loaded.present, loaded.missing, ev.target_system, ev.runs,
                              ev.bootstrap_draws, ev.bootstrap_seed, ev.confidence)
    intervals = macro_intervals(loaded.records, results.present, runs=ev.runs, draws=ev.bootstrap_draws,
                                seed=ev.bootstrap_seed, level=ev.confidence)
    records = read_records(root, [s for s in stages if s != "report"])
    curves = read_curves(root, records)
    folder = root / "reports" / params.profile
    gaps = cmp.measure_gaps(loaded.records, results.present, ev.runs, ev.bootstrap_draws, ev.bootstrap_seed,
                            ev.confidence)
    points = measure_points(loaded.records, loaded.funnel, ev.bootstrap_draws, ev.bootstrap_seed, ev.confidence,
                            stated=loaded.stated)
    sizes, dedup, commit = split_sizes(root), dedup_counts(root), git_commit(root)
    questions = int(intervals["questions"].max()) if len(intervals) else sizes.get("test", 0)
    made_by = {s: r for s, r in records.items() if s.partition("@")[0] in ("base_model", "train", "evaluate")}
    record = draw_record(profile=params.profile, identity=joint_identity(made_by), test_questions=questions,
                         level=level, results=results, gaps=gaps, kl_ends=cmp.searcher_kl_ends(curves), dedup=dedup,
                         funnel=record_entry(points), hashes=content_hashes(root, results.present))
    draws = draw_rows(load_draws(folder / "draws", params.profile), record, commit)

    curve_files = write_curve_files(curves, CURVE_METRICS, folder / "curves")
    write_metric_files(results, intervals, folder / "metrics", points)
    write_plot_files(results, intervals, BY_NAME[ev.target_system].label, folder / "plots")
    figure_names = []
    with atomic_dir(folder / "figures") as tmp:
        if results.present:
            figures.macro_with_intervals(intervals, {s.name: s.published_avg4 for s in SYSTEMS}, f"avg@{ev.runs}",
                                         level, params.profile, tmp / "macro_avg4.png")
            figure_names.append("figures/macro_avg4.png")
        if len(results.gaps):
            figures.gaps_with_intervals(results.gaps, pub.GAPS, ev.target_system, level,
                                        int(intervals["questions"].max()), tmp / "gaps.png")
            figure_names.append("figures/gaps.png")
        funnel_drawn = figures.funnel_bars(points.table, FUNNEL_CATEGORIES, tmp / Path(FUNNEL_FIGURE).name)
        if curves:
            dev = [m for m in CURVE_METRICS if m.key.startswith("dev_")]
            if figures.training_curves(curves, dev, tmp / "training_dynamics.png"):
                figure_names.append("figures/training_dynamics.png")
            if figures.training_curves(curves, [m for m in CURVE_METRICS if m not in dev],
                                       tmp / "training_diagnostics.png"):
                figure_names.append("figures/training_diagnostics.png")
        forest = draws_figure(draws, level, ev.runs, tmp / Path(DRAWS_FIGURE).name)

    comparisons_md = comparisons_section(results, gaps, curves, ev)
    model = model_summary(root)
    prov = Provenance(
        profile=params.profile, git_commit=commit, data_source=params.data.source,
        split_sizes=sizes, model=model,
        protocol={"runs": ev.runs, "bootstrap_draws": ev.bootstrap_draws, "bootstrap_seed": ev.bootstrap_seed,
                  "confidence": ev.confidence, "target_system": ev.target_system},
        records=records, experiment=experiment_name(params.profile), stages=list(stages), figures=figure_names,
        curves=list(curves), curve_files=curve_files,
        data_docs=data_docs(),
        scale=scale_section(measure_scale(results, intervals), params.profile, _model_text(model), level,
                            ev.target_system, dedup),
        comparisons=comparisons_md,
        points=points_section(points, results.present, level, ev.bootstrap_draws,
                              FUNNEL_FIGURE if funnel_drawn else None),
        across_draws=across_draws_section(draws, params.profile, level, ev.runs, DRAWS_FIGURE if forest else None),
        departures=departures(params),
    )
    md = build_markdown(results, prov)
    write_text(folder / "paper.md", md)
    write_text(folder / "paper.html", to_html(md, f"MultiAgent-OPD report ({params.profile})"))
    write_text(folder / "main_table.tex", latex_main_table(results, params.profile))
    write_json(folder / DRAW_FILE, record)
    metrics = metrics_dict(results, params.profile, points)
    metrics_path = root / "reports" / "metrics.json"
    write_json(metrics_path, metrics)
    return ReportOutput(results, metrics, folder, metrics_path, len(records), list(curves),
                        figure_names + ([DRAWS_FIGURE] if forest else []) + ([FUNNEL_FIGURE] if funnel_drawn else []),
                        time.perf_counter() - start)
