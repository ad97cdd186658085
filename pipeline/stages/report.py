"""Stage `report`: tables, figures, paper.md/html, main_table.tex, this run's draw record (draw.json)
and reports/metrics.json from DVC-tracked files only: the evaluation records, the training stages'
curves (data/curves/), every stage's record of its MLflow run (data/runs/) and the kept draws of
reports/<profile>/draws/ (pipeline.report). It reads nothing from MLflow; it logs into its own run."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from pipeline.config import Params
from pipeline.tracking.artifacts import KIND_TAG
from pipeline.tracking.runs import stage_run

REPORT_FILES = ("paper.html", "paper.md", "main_table.tex", "draw.json")
REPORT_FOLDERS = ("figures", "curves", "plots", "metrics")


def log_report(mlf: Any, folder: Path, metrics: Path) -> None:
    """The report folder, its figures beside the page; the logged paper.html embeds them
    (pipeline.report.paper.inline_images), so MLflow's artifact view shows them too, while the
    page on disk (and in git) links them and stays small."""
    from pipeline.report.paper import inline_images

    mlf.set_tag(KIND_TAG, "report")
    mlf.log_artifact(str(metrics))
    for name in REPORT_FILES:
        path = folder / name
        if not path.is_file():
            continue
        if name == "paper.html":
            with tempfile.TemporaryDirectory() as tmp:
                embedded = Path(tmp) / name
                embedded.write_text(inline_images(path.read_text(), folder))
                mlf.log_artifact(str(embedded))
        else:
            mlf.log_artifact(str(path))
    for name in REPORT_FOLDERS:
        if (folder / name).is_dir():
            mlf.log_artifacts(str(folder / name), artifact_path=name)


def log_report_metrics(mlf: Any, metrics: dict) -> None:
    """Each system's macro figures of reports/metrics.json, as `<system>.macro_<measure>`."""
    for name, values in metrics["systems"].items():
        mlf.log_metrics({f"{name}.macro_{m.replace('@', '_at_')}": v
                         for m, v in values["macro"].items() if v is not None})


def run_report(params: Params, root: Path) -> dict:
    """Tables, figures, paper.md/html, main_table.tex, draw.json and reports/metrics.json."""
    from pipeline.dag import stage_names
    from pipeline.report.build import build_report

    with stage_run("report", params.profile, {"target_system": params.common.eval.target_system}, root=root) as mlf:
        out = build_report(params, root, stage_names())
        log_report_metrics(mlf, out.metrics)
        mlf.log_metric("seconds", out.seconds)
        log_report(mlf, out.folder, out.metrics_path)
    return {"systems": len(out.results.present), "missing": out.results.missing, "curves": out.curves,
            "stage_records": out.records, "seconds": round(out.seconds, 2)}

