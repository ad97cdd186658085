"""The flow run's closing summary (a Prefect markdown artifact): what each stage did, the
report's main table and scale statement, and links to the report, MLflow and the Data Docs.
No Prefect here."""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path

from pipeline.mlflow_ui import experiment_url

SECTIONS = ("Main table", "What this scale can show")


def report_sections(paper_md: str, titles: tuple[str, ...] = SECTIONS) -> list[str]:
    """The named `## ` sections of the report's Markdown, heading included, in `titles` order."""
    found = {}
    for block in re.split(r"(?m)^(?=## )", paper_md):
        heading = block.splitlines()[0][3:].strip() if block.startswith("## ") else ""
        if heading in titles:
            found[heading] = block.strip()
    return [found[t] for t in titles if t in found]


def summary_markdown(root: Path, profile: str, statuses: Mapping[str, str], experiment_id: str | None) -> str:
    folder = root / "reports" / profile
    counts: dict[str, int] = {}
    for status in statuses.values():
        counts[status] = counts.get(status, 0) + 1
    lines = [f"# MultiAgent-OPD, {profile} profile",
             "",
             "Stages: " + ", ".join(f"{n} {s}" for s, n in sorted(counts.items())) + ".",
             ""]
    ran = [s for s, status in statuses.items() if status != "skipped"]
    if ran:
        lines += ["Ran or restored: " + ", ".join(f"`{s}`" for s in ran), ""]
    links = []
    if (folder / "paper.html").is_file():
        links.append(f"- Report: [{folder / 'paper.html'}]({(folder / 'paper.html').as_uri()})")
    if experiment_id is not None:
        links.append(f"- MLflow runs: [{experiment_url(experiment_id)}]({experiment_url(experiment_id)})")
    for index in sorted((folder / "data_docs").glob("*/index.html")):
        links.append(f"- Data Docs ({index.parent.name}): [{index}]({index.as_uri()})")
    links.append(f"- Plots: `dvc plots show` in `{root}` (then open `dvc_plots/index.html`)")
    lines += ["## Links", "", *links, ""]
    paper = folder / "paper.md"
    if paper.is_file():
        lines += [section.replace("## ", "## Report: ", 1) + "\n" for section in report_sections(paper.read_text())]
    else:
        lines.append(f"No report yet: `{paper}` does not exist.")
    return "\n".join(lines)
