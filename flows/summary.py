"""The flow run's closing summary (a Prefect markdown artifact): what each stage did, with a link
to its MLflow run, the report's main table and scale statement, and links to the report, MLflow
and the Data Docs. No Prefect here.

Every link is an http link into the MLflow server of `make mlflow-ui` (pipeline.mlflow_ui's
stable links: by experiment, run and file name): a browser does not follow a `file://` link
from the Prefect UI's http page, and an id would name one store only. The report and the Data
Docs open from the artifacts of the runs that wrote them.

The Prefect UI lays a table out at its widest cell, so the summary's tables have short headers
and short cells: the main table's column headers are shortened ("ours avg@4"), and paths
and links stay out of tables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pipeline.mlflow_ui import experiment_link, report_link, run_link, ui_url
from pipeline.tracking import experiment_name

SECTIONS = ("Main table", "What this scale can show")
LINKED = ("ran", "skipped", "restored")  # stages with an MLflow run once the flow records them
# the report's main-table headers, shortened for the summary
SHORT_HEADERS = ((re.compile(r"ours \([^)]*\) macro "), "ours "),
                 (re.compile(r"published \([^)]*\) macro "), "paper "))


def report_sections(paper_md: str, titles: tuple[str, ...] = SECTIONS) -> list[str]:
    """The named `## ` sections of the report's Markdown, heading included, in `titles` order."""
    found = {}
    for block in re.split(r"(?m)^(?=## )", paper_md):
        heading = block.splitlines()[0][3:].strip() if block.startswith("## ") else ""
        if heading in titles:
            found[heading] = block.strip()
    return [found[t] for t in titles if t in found]


def compact_table(section: str) -> str:
    """A report section with its table's header row shortened (SHORT_HEADERS)."""
    lines = section.splitlines()
    for i, line in enumerate(lines):
        if line.startswith("|"):
            for pattern, short in SHORT_HEADERS:
                line = pattern.sub(short, line)
            lines[i] = line
            break
    return "\n".join(lines)


def summary_markdown(root: Path, profile: str, statuses: Mapping[str, str]) -> str:
    folder = root / "reports" / profile
    experiment = experiment_name(profile)
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    lines = [f"# MultiAgent-OPD, {profile} profile",
             "",
             "Stages: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".",
             ""]
    links = []
    if (folder / "paper.html").is_file():
        links.append(f"- Report: [paper.html]({report_link(profile, 'paper.html')}) "
                     f"(on disk: `reports/{profile}/paper.html`)")
    links.append(f"- MLflow: [the runs of {experiment}]({experiment_link(experiment)})")
    for index in sorted((folder / "data_docs").glob("*/index.html")):
        links.append(f"- Data Docs, {index.parent.name}: "
                     f"[index.html]({report_link(profile, f'data_docs/{index.parent.name}/index.html')})")
    links.append("- Plots: `dvc plots show` in the checkout, then open `dvc_plots/index.html`")
    lines += ["## Links", "",
              f"The links open in the MLflow server of `make mlflow-ui` ({ui_url()}, or `MLFLOW_UI_URL`), "
              "which serves the report and the Data Docs from the runs that wrote them.", "",
              *links, ""]
    lines += ["## Stages", "", "| stage (MLflow run) | outcome |", "|---|---|",
              *(f"| [{stage}]({run_link(experiment, stage)}) | {status} |" if status in LINKED
                else f"| {stage} | {status} |" for stage, status in statuses.items()),
              ""]
    paper = folder / "paper.md"
    if paper.is_file():
        lines += [compact_table(section).replace("## ", "## Report: ", 1) + "\n"
                  for section in report_sections(paper.read_text())]
    else:
        lines.append(f"No report yet: `reports/{profile}/paper.md` does not exist.")
    return "\n".join(lines)
