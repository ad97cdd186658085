"""The DVC DAG as code: every stage's data inputs, params and outputs, and its code dependencies
derived from what it imports, written to dvc.yaml by `python -m pipeline dvc-yaml`.

A stage's code deps are its import closure inside `pipeline/`: the modules its module imports,
at module level or inside functions, and what those import, transitively (package `__init__`
files included, and files a module opens beside itself, e.g. agents/prompts.yaml). The command
line a stage runs (`python -m pipeline run <stage>`) adds pipeline/__main__.py, cli.py and
stages/__init__.py with their module-level imports only: cli.py's function-level imports serve
its other commands. A package whose every file is in the closure is listed as its folder.
tests/test_dvc_dag.py keeps dvc.yaml equal to what this module writes, checks each closure
against the modules a ci run of the stage loaded, and checks each stage's params against the
keys a ci run read.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

from pipeline.report.curves import CURVE_METRICS
from pipeline.stage_io.registry import STAGE_MODULES
from pipeline.systems import BASE_WEIGHTS, SYSTEMS, TEACHER, TRAINED

PACKAGE = Path(__file__).resolve().parent  # pipeline/
ROOT = PACKAGE.parent
ENTRY = ("pipeline/__main__.py", "pipeline/cli.py", "pipeline/stages/__init__.py")
DATA_SUFFIXES = (".yaml", ".yml", ".json")


# --------------------------------------------------------------------------- import closure


def module_path(module: str) -> Path | None:
    """The file of `pipeline.x.y` (module or package), relative to the repository root; None if
    it is not a project module."""
    if module != "pipeline" and not module.startswith("pipeline."):
        return None
    base = ROOT / Path(*module.split("."))
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path.relative_to(ROOT)
    return None


def _imported(tree: ast.AST, module: str, top_level_only: bool) -> set[str]:
    """Module names one file imports (project or not); `from a import b` yields a and a.b."""
    nodes = tree.body if top_level_only else list(ast.walk(tree))
    package = module if module_path(module) and module_path(module).name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in nodes:
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                base = ".".join(parts[: len(parts) - node.level + 1] + ([base] if base else []))
            out.add(base)
            out.update(f"{base}.{alias.name}" for alias in node.names)
    return out


@cache
def _parse(path: Path) -> ast.Module:
    return ast.parse((ROOT / path).read_text(), filename=str(path))


def _module_name(path: Path) -> str:
    parts = list(path.with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _with_packages(module: str) -> list[str]:
    """`a.b.c` -> a, a.b, a.b.c: importing a module runs its packages' __init__ first."""
    parts = module.split(".")
    return [".".join(parts[: i + 1]) for i in range(len(parts))]


def _beside(path: Path) -> set[Path]:
    """Data files a module names by their bare file name and that lie beside it."""
    text = (ROOT / path).read_text()
    suffixes = "|".join(re.escape(s) for s in DATA_SUFFIXES)
    names = set(re.findall(rf"[\"']([\w.-]+(?:{suffixes}))[\"']", text))
    return {path.parent / n for n in names if (ROOT / path.parent / n).is_file()}


def import_closure(module: str) -> set[Path]:
    """Every project file that running `python -m pipeline run` of the stage in `module` may
    load (see the module doc)."""
    entry = {_module_name(Path(p)) for p in ENTRY}
    files: set[Path] = set()
    todo = [module, *entry]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        for mod in _with_packages(name):
            path = module_path(mod)
            if mod in seen or path is None:
                continue
            seen.add(mod)
            files.add(path)
            files |= _beside(path)
            todo.extend(m for m in _imported(_parse(path), mod, top_level_only=mod in entry) if m not in seen)
    return files


def compress(files: set[Path]) -> list[str]:
    """Sorted dep paths, a folder standing for a package whose every tracked file is listed."""
    listed = set(files)

    def whole(folder: Path) -> bool:
        on_disk = {p.relative_to(ROOT) for p in (ROOT / folder).rglob("*")
                   if p.is_file() and "__pycache__" not in p.parts and p.suffix in (".py", *DATA_SUFFIXES)}
        return bool(on_disk) and on_disk <= listed

    out: set[str] = set()
    for path in files:
        folder = path.parent
        chosen = path.as_posix()
        while folder != Path("pipeline") and folder != Path("."):
            if whole(folder):
                chosen = folder.as_posix()
            folder = folder.parent
        out.add(chosen)
    return sorted(out)


def code_deps(stage: str) -> list[str]:
    """The code deps of pipeline stage `stage` (a key of pipeline.stages.STAGE_MODULES)."""
    return compress(import_closure(f"pipeline.stages.{STAGE_MODULES[stage]}"))


# --------------------------------------------------------------------------- the stages


@dataclass(frozen=True)
class Stage:
    """One entry of dvc.yaml. `data` are data deps, `params` the keys the stage reads
    (`${profile}` is the active profile); foreach stages template `${key}` and `${item.*}`."""

    name: str
    doc: str
    data: tuple[str, ...]
    params: tuple[str, ...]
    outs: tuple = ()
    metrics: tuple = ()
    foreach: dict | None = None
    arg: str = ""  # the foreach argument of the command (`${key}`)
    extra: dict = field(default_factory=dict)


P = "${profile}"
PROTOCOL_WORKFLOW = tuple(f"common.protocol.{k}" for k in
                          ("cascade_steps", "hierarchy_steps", "max_waves", "max_parallel", "top_k"))
UNCACHED = {"cache": False}
THREADS = f"{P}.threads"  # every stage computes with the profile's threads (pipeline.threads)

STAGES: tuple[Stage, ...] = (
    Stage("splits", "The question pool, deduplicated on the normalised question, sampled into train, dev and test.",
          data=(), params=("profile", f"{P}.data"), outs=("data/splits",)),
    Stage("corpus", "The passage corpus in wiki-18 form.",
          data=(), params=("profile", f"{P}.data.source", f"{P}.data.world", f"{P}.data.raw_dir", f"{P}.index.kind"),
          outs=("data/corpus",)),
    Stage("validate_splits", "Great Expectations on the splits: no leakage, exact quotas, unique ids.",
          data=("data/splits",), params=("profile", f"{P}.data.test_quotas"),
          outs=("data/validation/splits.json", {f"reports/{P}/data_docs/splits": {"persist": False}})),
    Stage("index", "E5 vectors of the corpus in a faiss index.",
          data=("data/corpus",), params=("profile", f"{P}.index"), outs=("data/index",)),
    Stage("base_model", "The base model every system starts from, and its behaviour on dev.",
          data=("data/validation/splits.json", "data/corpus", "data/splits", "data/index"),
          params=("profile", *PROTOCOL_WORKFLOW, "common.protocol.eval_candidates", f"{P}.base_model",
                  f"{P}.eval.rollout", f"{P}.eval.seed", f"{P}.engine"),
          outs=("data/models/base", "data/metrics/base_behaviour.json")),
    Stage("validate_masks", "A base-model rollout of both workflows; Great Expectations on every token's mask.",
          data=("data/models/base", "data/index", "data/splits/dev.parquet"),
          params=("profile", *PROTOCOL_WORKFLOW, "common.protocol.train_candidates", f"{P}.validate_masks",
                  f"{P}.eval.rollout", f"{P}.engine"),
          outs=("data/audit/base", {f"reports/{P}/data_docs/masks": {"persist": False}})),
    Stage("stage2_start", "What the five Stage-II runs share at step 0, computed once: the Teacher's dev Searcher "
          "contexts of the dev KL and the base model's step-0 dev metrics.",
          data=("data/splits/dev.parquet", "data/index", f"data/models/{BASE_WEIGHTS}", f"data/models/{TEACHER}"),
          params=("profile", *PROTOCOL_WORKFLOW, "common.protocol.eval_candidates", f"{P}.train.shared.dev_questions",
                  f"{P}.eval.rollout", f"{P}.eval.seed", f"{P}.engine"),
          outs=("data/stage2_start",)),
    Stage("train", "Stage I (c_mas_rl, the Teacher) and Stage II (the others) from the base model. The last two "
          "deps are the Stage-I Teacher, which every Stage-II system reads (as its Teacher or for the dev KL "
          "diagnostic), and the shared Stage-II start; c_mas_rl itself lists two of its inputs twice instead. "
          "Checkpoints (data/checkpoints/) and audits (data/audit/) are not outputs: a killed stage resumes "
          "from them.",
          data=("data/audit/base", "data/splits/train.parquet", "data/splits/dev.parquet", "data/index",
                f"data/models/{BASE_WEIGHTS}", "data/models/${item.teacher}", "${item.start}"),
          params=("profile", *PROTOCOL_WORKFLOW, "common.protocol.train_candidates",
                  "common.protocol.eval_candidates", "common.rewards", "common.optim", f"{P}.train.shared",
                  f"{P}.eval.rollout", f"{P}.eval.seed", f"{P}.engine", f"{P}.train.systems.${{key}}"),
          outs=("data/models/${key}", "data/curves/${key}.csv"),
          foreach={s.name: ({"teacher": TEACHER, "start": "data/stage2_start"} if s.workflow == "hierarchy" else
                            {"teacher": BASE_WEIGHTS, "start": "data/audit/base"}) for s in TRAINED},
          arg="${key}"),
    Stage("evaluate", "Each test question 4 times, 1 Answerer candidate; finished shards under "
          "data/eval/<system>/shards/ are resume state, not an output.",
          data=("data/splits/test.parquet", "data/index", "data/models/${item.weights}"),
          params=("profile", *PROTOCOL_WORKFLOW, "common.protocol.eval_candidates", "common.eval.runs", f"{P}.eval",
                  f"{P}.engine"),
          outs=("data/eval/${key}/records.parquet",),
          foreach={s.name: {"weights": s.weights} for s in SYSTEMS}, arg="${key}"),
    Stage("report", "Tables, figures and metrics beside the published numbers from DVC-tracked files only: the "
          "evaluation records (not the shards), the index's passages (the facts-read measure), the training "
          "stages' curves and every stage's record of the MLflow run that made its outputs (data/runs/, what the "
          "report's links open); nothing is read from MLflow. "
          "The kept draws (reports/<profile>/draws/, scripts/draw.py) are a dep: keeping one re-makes the report; "
          "draw.json is this run's record, which a kept draw copies.",
          data=(*(f"data/eval/{s.name}/records.parquet" for s in SYSTEMS), "data/splits", "data/index",
                *(f"data/models/{w}" for w in dict.fromkeys(s.weights for s in SYSTEMS)),
                *(f"data/curves/{s.name}.csv" for s in TRAINED), "data/runs/splits.json", "data/runs/corpus.json",
                "data/runs/validate_splits.json", "data/runs/index.json", "data/runs/base_model.json",
                "data/runs/validate_masks.json", "data/runs/stage2_start.json",
                *(f"data/runs/train/{s.name}.json" for s in TRAINED),
                *(f"data/runs/evaluate/{s.name}.json" for s in SYSTEMS),
                f"reports/{P}/draws"),
          params=("profile", f"{P}.data.source", "common.eval", f"{P}.train.shared.opd_beta",
                  f"{P}.train.shared.tie_on", *(f"{P}.train.systems.{s.name}.oversample" for s in TRAINED),
                  f"{P}.train.systems.{TEACHER}.searcher_outcome"),
          outs=tuple({path: dict(UNCACHED)} for path in (
              "reports/metrics.json", f"reports/{P}/paper.md", f"reports/{P}/paper.html",
              f"reports/{P}/main_table.tex", f"reports/{P}/draw.json", f"reports/{P}/figures", f"reports/{P}/curves",
              f"reports/{P}/plots")),
          metrics=({f"reports/{P}/metrics": dict(UNCACHED)},)),
)

# `dvc plots show`: one plot per file, each titled with what it shows and its own axis labels;
# the templates (.dvc/plots/, pipeline.report.dvc_templates) colour each system with its colour.
PLOTS = [
    *({f"reports/{P}/curves/{m.key}.csv": {
        "x": "step", "y": m.key, "template": "by_system", "title": f"{m.title}, one line per system",
        "x_label": "training step", "y_label": m.unit or m.key}} for m in CURVE_METRICS),
    {f"reports/{P}/plots/macro.csv": {
        "x": "value", "y": "system", "template": "intervals",
        "title": "Macro scores per system (ours), each with its bootstrap interval",
        "x_label": "percent of test questions (point: the score; line: its interval)", "y_label": "system"}},
    {f"reports/{P}/plots/gaps.csv": {
        "x": "value", "y": "system", "template": "intervals",
        "title": "Paired gaps: the target system minus each other system, macro score",
        "x_label": "percentage points (point: the gap; line: its paired interval)", "y_label": "baseline system"}},
]


def record_out(stage: Stage) -> str:
    """The stage's record of the MLflow run that made its outputs (pipeline.tracking.stage_record)."""
    return f"data/runs/{stage.name}/${{key}}.json" if stage.foreach else f"data/runs/{stage.name}.json"


def stage_names() -> list[str]:
    """Every stage as DVC runs it, foreach groups expanded (`train@c_mas_rl`), in DAG order."""
    return [name for stage in STAGES
            for name in ([f"{stage.name}@{key}" for key in stage.foreach] if stage.foreach else [stage.name])]


def _body(stage: Stage) -> dict:
    cmd = f"python -m pipeline run {stage.name}" + (f" {stage.arg}" if stage.arg else "")
    body: dict = {"cmd": cmd, "deps": [*stage.data, *code_deps(stage.name)], "params": [*stage.params, THREADS]}
    body["outs"] = [*stage.outs, record_out(stage)]
    if stage.metrics:
        body["metrics"] = list(stage.metrics)
    return body


def dvc_yaml() -> dict:
    """dvc.yaml as a dict: every stage, then the plots."""
    stages: dict = {}
    for stage in STAGES:
        body = _body(stage)
        stages[stage.name] = {"foreach": stage.foreach, "do": body} if stage.foreach else body
    return {"stages": stages, "plots": PLOTS}


HEADER = """\
# The whole paper as a DAG: `dvc repro` rebuilds it. Written by `python -m pipeline dvc-yaml` from
# pipeline/dag.py (edit that, not this file): each stage's code deps are its import closure
# inside pipeline/, its params exactly the keys it reads; tests/test_dvc_dag.py checks both.
"""


def render() -> str:
    """dvc.yaml's text: the header, then each stage with its description as a comment."""
    import yaml

    data = dvc_yaml()
    docs = {s.name: s.doc for s in STAGES}
    lines = [HEADER, "stages:"]
    for name, body in data["stages"].items():
        lines.append("")
        lines.extend(f"  # {line}" for line in _wrap(docs[name], 96))
        text = yaml.safe_dump({name: body}, sort_keys=False, default_flow_style=False, width=100)
        lines.extend("  " + line if line else line for line in text.rstrip("\n").split("\n"))
    lines.append("")
    lines.append("# `dvc plots show` (offline page: `make setup` writes the template named in .dvc/config)")
    lines.append(yaml.safe_dump({"plots": data["plots"]}, sort_keys=False).rstrip("\n"))
    return "\n".join(lines) + "\n"


def _wrap(text: str, width: int) -> list[str]:
    import textwrap

    return textwrap.wrap(text, width)


def generated_files(root: Path = ROOT) -> dict[Path, str]:
    """{path: text} of every file this module generates: dvc.yaml and the `dvc plots` templates."""
    from pipeline.report.dvc_templates import template_files

    return {root / "dvc.yaml": render(), **template_files(root)}


def write(path: Path) -> Path:
    from pipeline.io import write_text

    write_text(path, render())
    return path
