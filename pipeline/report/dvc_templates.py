"""The Vega-Lite templates `dvc plots` draws with (`.dvc/plots/<name>.json`), generated from the
systems registry: every plot colours a system with its one colour (pipeline.systems), through
a colour scale with a fixed domain (the system names) and range (their colours), so a system
keeps its colour from plot to plot whichever systems a file holds.

`python -m pipeline dvc-yaml` writes them with dvc.yaml; `--check` (run by `make lint`) fails
when a committed template differs from what the registry gives. The plots' titles and axis
labels come from dvc.yaml's `plots:` section (pipeline.dag.PLOTS), which DVC puts in
the templates' `<DVC_METRIC_*>` anchors.
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.io import write_text
from pipeline.systems import SYSTEMS

FOLDER = Path(".dvc") / "plots"
SCHEMA = "https://vega.github.io/schema/vega-lite/v5.json"  # an identifier: nothing loads it


def colour_scale() -> dict:
    return {"domain": [s.name for s in SYSTEMS], "range": [s.colour for s in SYSTEMS]}


def _system_colour(title: str | None = "system") -> dict:
    return {"field": "system", "type": "nominal", "scale": colour_scale(),
            "legend": {"orient": "right", "title": title}}


def by_system() -> dict:
    """One line per system against the training step (curves/<metric>.csv)."""
    return {
        "$schema": SCHEMA,
        "data": {"values": "<DVC_METRIC_DATA>"},
        "title": "<DVC_METRIC_TITLE>",
        "width": 420,
        "height": 260,
        "mark": {"type": "line", "point": True, "tooltip": True},
        "encoding": {
            "x": {"field": "<DVC_METRIC_X>", "type": "quantitative", "title": "<DVC_METRIC_X_LABEL>"},
            "y": {"field": "<DVC_METRIC_Y>", "type": "quantitative", "title": "<DVC_METRIC_Y_LABEL>",
                  "scale": {"zero": False}},
            "color": _system_colour(),
            "strokeDash": {"field": "rev", "type": "nominal", "title": "revision"},
        },
    }


def intervals() -> dict:
    """A point and its interval per system, one row of panels per measure (plots/*.csv); the
    revisions of `dvc plots diff` sit side by side within a system's row, told apart by shape."""
    return {
        "$schema": SCHEMA,
        "data": {"values": "<DVC_METRIC_DATA>"},
        "title": "<DVC_METRIC_TITLE>",
        "facet": {"row": {"field": "measure", "type": "nominal", "title": None,
                          "header": {"labelFontSize": 12, "labelAngle": 0, "labelAlign": "left",
                                     "labelOrient": "top"}}},
        "resolve": {"scale": {"x": "independent"}},
        "spec": {
            "width": 420,
            "encoding": {
                "y": {"field": "<DVC_METRIC_Y>", "type": "nominal", "title": "<DVC_METRIC_Y_LABEL>", "sort": None},
                "yOffset": {"field": "rev", "type": "nominal"},
                "color": _system_colour(),
            },
            "layer": [
                {"mark": "rule",
                 "encoding": {"x": {"field": "low", "type": "quantitative", "title": "<DVC_METRIC_X_LABEL>"},
                              "x2": {"field": "high"}}},
                {"mark": {"type": "point", "filled": True, "size": 60},
                 "encoding": {"x": {"field": "<DVC_METRIC_X>", "type": "quantitative"},
                              "shape": {"field": "rev", "type": "nominal", "title": "revision"},
                              "tooltip": [{"field": "system"}, {"field": "measure"}, {"field": "value"},
                                          {"field": "low"}, {"field": "high"}, {"field": "rev"}]}},
            ],
        },
    }


TEMPLATES = {"by_system": by_system, "intervals": intervals}


def render(name: str) -> str:
    return json.dumps(TEMPLATES[name](), indent=2) + "\n"


def template_files(repo: Path) -> dict[Path, str]:
    """{path: text} of every template."""
    return {repo / FOLDER / f"{name}.json": render(name) for name in TEMPLATES}


def write_templates(repo: Path) -> list[Path]:
    written = []
    for path, text in template_files(repo).items():
        write_text(path, text)
        written.append(path)
    return written
