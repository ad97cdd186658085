"""The generated paper report: Markdown assembled from computed tables, and its HTML."""

from __future__ import annotations

import base64
import html
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pipeline.report import published as pub
from pipeline.report import tables as t
from pipeline.report.results import Results
from pipeline.systems import BY_NAME
from pipeline.tracking.links import experiment_link, run_link
from pipeline.tracking.stage_record import StageRecord


@dataclass
class Provenance:
    profile: str
    git_commit: str  # `<sha>` or `<sha>-dirty` (pipeline.provenance.git_commit)
    data_source: str
    split_sizes: dict[str, int]
    model: dict[str, Any]
    protocol: dict[str, Any]  # runs, bootstrap draws, seed, confidence
    records: dict[str, StageRecord] = field(default_factory=dict)  # stage -> the run that made its outputs
    experiment: str = ""  # the MLflow experiment of the profile
    stages: list[str] = field(default_factory=list)  # every stage of the DAG: one MLflow run each
    figures: list[str] = field(default_factory=list)  # paths relative to the report folder
    curves: list[str] = field(default_factory=list)  # systems with a training curve
    curve_files: list[str] = field(default_factory=list)  # under curves/, one per metric
    data_docs: list[str] = field(default_factory=list)  # index pages, relative to the report folder
    scale: str = ""  # Markdown bullets: at what scale, what it can and cannot show
    comparisons: str = ""  # Markdown: the paper's comparisons measured at this scale
    points: str = ""  # Markdown: where the points go (each role's share of the score)
    across_draws: str = ""  # Markdown: the same comparisons in every kept draw and this run
    departures: list[str] = field(default_factory=list)  # Markdown: training settings apart from the paper's


def code_line(commit: str) -> str:
    sha = commit.removesuffix("-dirty")
    if commit in ("", "unknown"):
        return "Code: not a git checkout (commit unknown)"
    if commit.endswith("-dirty"):
        return (f"Code: uncommitted changes on top of commit `{sha}`; no commit holds the code this report "
                "was built from (commit the code before `dvc repro` to pin it)")
    return f"Code: commit `{sha}` (the report was built from exactly this commit's code)"


def _provenance(p: Provenance, results: Results) -> str:
    sizes = ", ".join(f"{k} {v}" for k, v in p.split_sizes.items()) or "split files not found"
    per_dataset = ""
    if len(results.per_dataset):
        first = results.per_dataset[results.per_dataset["system"] == results.present[0]]
        counts = dict(zip(first["dataset"], first["n_questions"]))
        per_dataset = " (test questions per dataset: " + ", ".join(
            f"{t.DATASET_LABELS.get(d, d)} {counts[d]}" for d in t.datasets_of(results) if d in counts) + ")"
    model = ", ".join(f"{k} {v}" for k, v in p.model.items() if k != "folder")
    proto = ", ".join(f"{k} {v}" for k, v in p.protocol.items())
    docs = ", ".join(f"[{Path(d).parent.name}]({d})" for d in p.data_docs) or "none found"
    return t.md_list([
        f"Profile: **{p.profile}**",
        code_line(p.git_commit),
        f"Data: source {p.data_source}; splits: {sizes}{per_dataset}",
        f"Data validation (Great Expectations Data Docs): {docs}",
        f"Base model: `{p.model.get('folder')}` ({model or 'no config summary'})",
        f"Evaluation protocol: {proto}",
    ])


def _section(title: str, body: str) -> str:
    return f"## {title}\n\n{body.strip()}\n"


def _runs_section(prov: Provenance) -> str:
    """Every stage's MLflow run, linked by the id its stage recorded beside its outputs
    (data/runs/, pipeline.tracking.stage_record): each link opens the run that made the outputs
    this report read, whatever ran later in the same store."""
    if not prov.stages:
        return "No stages given; no MLflow links."
    rows = []
    for stage in prov.stages:
        kind, _, name = stage.partition("@")
        label = BY_NAME[name].label if name in BY_NAME else ""
        if kind == "train":
            holds = f"{label}: the model" + (", and the training curves drawn above" if name in prov.curves else "")
        elif kind == "evaluate":
            holds = f"{label}: its evaluation's metrics and records"
        else:
            holds = {"report": "this report, its figures and files", "base_model": "the base model",
                     "validate_splits": "the Data Docs of the splits", "index": "the retrieval index's figures",
                     "validate_masks": "the Data Docs of the token masks"}.get(stage, "its params and figures")
        record = prov.records.get(stage)
        if stage == "report":
            cell = f"`{stage}`"
            holds += " (the run that builds this report: its id is in `data/runs/report.json` once it ends)"
        elif record is None:
            cell = f"`{stage}`"
            holds += "; no record of its run in `data/runs/` (the stage has not run in this checkout)"
        else:
            cell = f"[`{stage}`]({run_link(record.run_id)})"
        rows.append(f"| {cell} | {holds} |")
    intro = (f"One run per stage in the MLflow experiment `{prov.experiment}` "
             f"([all its runs]({experiment_link(prov.experiment)})). Each stage records the id of the run that "
             "made its outputs beside them (`data/runs/<stage>.json`, a DVC output), and each link names that id: "
             "it opens the run that made the number, in the store of the machine that made it (`make mlflow-ui`), "
             "whatever ran there later. Nothing in this report was read from MLflow.")
    table = "\n".join(["| stage (MLflow run) | what the run holds |", "|:---|:---|", *rows])  # text: left-aligned
    return intro + "\n\n" + table


def _figures(prov: Provenance) -> str:
    body = "\n\n".join(f"![{f}]({f})" for f in prov.figures)
    if prov.curves:
        body += "\n\nCurves for `dvc plots show` (one file per metric, one line per system): " + ", ".join(
            f"[`curves/{f}`](curves/{f})" for f in prov.curve_files)
    else:
        body += "\n\nNo training stage's curves (`data/curves/<system>.csv`) were found; no training curves."
    return body


def build_markdown(results: Results, prov: Provenance) -> str:
    k = results.runs
    parts = [
        f"# MultiAgent-OPD reproduction report ({prov.profile})\n",
        "Every number in the *ours* columns is computed by the `report` stage from "
        "`data/eval/<system>/records.parquet`; the columns labelled "
        f"*{pub.LABEL}* are quoted from the paper for comparison.\n",
        _section("Provenance", _provenance(prov, results)),
        _section("Main table", t.markdown(t.main_table(results, prov.profile))
                 + "\n\nStrict extraction; macro = unweighted mean over the datasets."),
        _section("What this scale can show", prov.scale),
    ]
    if prov.comparisons:
        parts.append(_section("The paper's comparisons at this scale", prov.comparisons))
    if prov.points:
        parts.append(_section("Where the points go", prov.points))
    if prov.across_draws:
        parts.append(_section("Across draws", prov.across_draws))
    if prov.departures:
        parts.append(_section("Departures from the paper's constants", t.md_list(prov.departures)))
    if results.present:
        parts += [
            _section(f"Per dataset avg@{k}", t.markdown(t.per_dataset_table(results, f"avg@{k}"))
                     + f"\n\n{pub.LABEL}: {t.published_dataset_points()}."),
            _section(f"Per dataset pass@{k}", t.markdown(t.per_dataset_table(results, f"pass@{k}"))),
            _section(f"all@{k}", t.markdown(t.all_table(results))),
        ]
        level = int(round(float(prov.protocol.get("confidence", 0.95)) * 100))
        if len(results.gaps):
            parts.append(_section(
                f"Paired bootstrap: {level}% intervals of the macro avg@{k} gap",
                t.markdown(t.gap_table(results, repair=False))
                + f"\n\n{prov.protocol.get('bootstrap_draws')} draws, questions resampled within each dataset, "
                "the same draws for both systems. Every system is evaluated with the same sampling seed, and a "
                "request's random numbers depend only on that seed and the request (question, run, call, turn), "
                "so where two systems' policies agree their samples agree (common random numbers) and that part "
                "of the sampling noise cancels in their gap."))
            parts.append(_section(
                "Perfect-repair bounds",
                t.markdown(t.gap_table(results, repair=True))
                + "\n\nThe gap recomputed as if every format failure of the baseline were correct."))
        parts += [
            _section("Ablations", t.markdown(t.ablation_table(results))),
            _section("Workload per workflow", t.markdown(t.workload_table(results))),
            _section("Format and behaviour", t.markdown(t.behaviour_table(results))
                     + "\n\n" + t.published_behaviour_note()),
        ]
    parts.append(_section("Figures and training dynamics", _figures(prov)))
    parts.append(_section("MLflow runs", _runs_section(prov)))
    if results.notes:
        parts.append(_section("Notes", t.md_list(results.notes)))
    return "\n".join(parts)


def _fallback_html(md: str) -> str:
    """Minimal Markdown -> HTML (headings, tables, lists, images, paragraphs)."""
    out, table = [], []

    def inline(text: str) -> str:
        text = html.escape(text)
        text = re.sub(r"!\[(.*?)\]\((.*?)\)", r'<img alt="\1" src="\2">', text)
        text = re.sub(r"\[(.+?)\]\((.+?)\)", r'<a href="\2">\1</a>', text)
        text = re.sub(r"\*\*(.+?)\*\*", r"<strong>\1</strong>", text)
        text = re.sub(r"\*(.+?)\*", r"<em>\1</em>", text)
        return re.sub(r"`(.+?)`", r"<code>\1</code>", text)

    def flush() -> None:
        if table:
            cells = [[c.strip() for c in row.strip().strip("|").split("|")]
                     for row in table if not re.fullmatch(r"\|[\s:|-]+\|", row.strip())]
            head = "".join(f"<th>{inline(c)}</th>" for c in cells[0])
            body = "".join("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in r) + "</tr>" for r in cells[1:])
            out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>")
            table.clear()

    for line in md.splitlines():
        if line.startswith("|"):
            table.append(line)
            continue
        flush()
        if m := re.match(r"(#+) (.*)", line):
            out.append(f"<h{len(m.group(1))}>{inline(m.group(2))}</h{len(m.group(1))}>")
        elif line.startswith("- "):
            out.append(f"<ul><li>{inline(line[2:])}</li></ul>")
        elif line.strip():
            out.append(f"<p>{inline(line)}</p>")
    flush()
    return "\n".join(out)


def inline_images(body: str, folder: Path) -> str:
    """<img src="figures/x.png"> -> a data: URI (the PNG under `folder`), so a page shows its
    figures where relative files do not resolve (MLflow's artifact view, a Prefect artifact)."""

    def inline(match: re.Match) -> str:
        path = folder / html.unescape(match.group(2))
        if not path.is_file():
            return match.group(0)
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        return f'{match.group(1)}data:image/png;base64,{data}"'

    return re.sub(r'(<img [^>]*src=")([^":]+\.png)"', inline, body)


def to_html(md: str, title: str, folder: Path | None = None) -> str:
    """The page for a browser, its figures linked by relative path (the committed page stays
    small: the figures are files beside it); with `folder`, they are embedded (inline_images)."""
    try:
        import markdown

        body = markdown.markdown(md, extensions=["tables"])
    except ImportError:
        body = _fallback_html(md)
    if folder is not None:
        body = inline_images(body, folder)
    style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto;line-height:1.4}"
             "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:3px 8px;"
             "text-align:right}td:first-child,th:first-child{text-align:left}img{max-width:100%}")
    return (f"<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\"><title>{html.escape(title)}</title>"
            f"<style>{style}</style></head>\n<body>\n{body}\n</body></html>\n")
