"""The flow run's closing summary (a Prefect markdown artifact): what each stage did, with a link
to its MLflow run, the report's main table and scale statement, and links to the report, MLflow
and the Data Docs. No Prefect here.

Every link is an http link into the MLflow server of `make mlflow-ui` (pipeline.tracking.links):
a browser does not follow a `file://` link from the Prefect UI's http page. A stage's link names
its run by the id the stage recorded (data/runs/<stage>.json, pipeline.tracking.stage_record),
so it opens the run that made the stage's outputs, never "the newest run of this name"; the
report and the Data Docs open from the artifacts of the runs that wrote them, by the same ids. A
stage without a record (it failed, or never ran here) gets no link.

The Prefect UI lays a table out at its widest cell, so the summary's tables have short headers
and short cells: the main table's column headers are shortened ("ours avg@4"), and paths
and links stay out of tables.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pipeline.tracking.links import experiment_link, report_file_link, run_link, ui_url
from pipeline.tracking.runs import experiment_name
from pipeline.tracking.stage_record import read_record

SECTIONS = ("Main table", "What this scale can show")
LINKED = ("ran", "skipped", "restored")  # outcomes whose outputs (and record) stand in the run root
NO_RUN = "no run recorded"  # such a stage without a record (data/runs/<stage>.json) in the run root
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


def _stage_row(root: Path, profile: str, stage: str, status: str) -> str:
    """The stage's row: its name links the run its record names, else says it has none; a stage
    that failed or did not run gets no link (the outputs in the run root are not of this run)."""
    if status not in LINKED:
        return f"| {stage} | {status} |"
    record = read_record(root, stage)
    if record is None or record.profile != profile:
        return f"| {stage} | {status}, {NO_RUN} |"
    return f"| [{stage}]({run_link(record.run_id)}) | {status} |"


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
    report = report_file_link(root, profile, "paper.html") if (folder / "paper.html").is_file() else None
    if report is not None:
        links.append(f"- Report: [paper.html]({report}) (on disk: `reports/{profile}/paper.html`)")
    elif (folder / "paper.html").is_file():
        links.append(f"- Report: `reports/{profile}/paper.html` ({NO_RUN} for the stage `report`)")
    links.append(f"- MLflow: [the runs of {experiment}]({experiment_link(experiment)})")
    for index in sorted((folder / "data_docs").glob("*/index.html")):
        name = index.parent.name
        docs = report_file_link(root, profile, f"data_docs/{name}/index.html")
        links.append(f"- Data Docs, {name}: [index.html]({docs})" if docs is not None
                     else f"- Data Docs, {name}: `reports/{profile}/data_docs/{name}/index.html` ({NO_RUN})")
    links.append("- Plots: `dvc plots show` in the checkout, then open `dvc_plots/index.html`")
    lines += ["## Links", "",
              f"The links open in the MLflow server of `make mlflow-ui` ({ui_url()}, or `MLFLOW_UI_URL`), "
              "each at the run that made the output, by the id its stage recorded; the server serves the "
              "report and the Data Docs from those runs' artifacts.", "",
              *links, ""]
    lines += ["## Stages", "", "| stage (MLflow run) | outcome |", "|---|---|",
              *(_stage_row(root, profile, stage, status) for stage, status in statuses.items()),
              ""]
    paper = folder / "paper.md"
    if paper.is_file():
        lines += [compact_table(section).replace("## ", "## Report: ", 1) + "\n"
                  for section in report_sections(paper.read_text())]
    else:
        lines.append(f"No report yet: `reports/{profile}/paper.md` does not exist.")
    return "\n".join(lines)
