"""dvc.yaml's code deps are exact: every stage lists the project files its command imports (its
import closure inside pipeline/), and no project file it does not import. The params side (each
stage lists exactly the keys it reads) needs a run of every stage: tests/test_end_to_end.py checks
it, with the modules each stage really loaded, on the ci profile."""

from __future__ import annotations

import copy
from pathlib import Path

import yaml

from pipeline.dag import import_closure, render
from pipeline.stages import STAGE_MODULES
from tests.conftest import REPO_ROOT


def load_dvc_yaml(path: Path = REPO_ROOT / "dvc.yaml") -> dict:
    return yaml.safe_load(path.read_text())


def stage_bodies(spec: dict) -> dict[str, dict]:
    """{stage name as DVC runs it: its body}, foreach items expanded (`${key}` and `${item.x}`
    filled in; other interpolations such as `${profile}` are left as written)."""
    out = {}
    for name, body in spec["stages"].items():
        if "foreach" not in body:
            out[name] = body
            continue
        for key, item in body["foreach"].items():
            text = yaml.safe_dump(body["do"]).replace("${key}", key)
            for field, value in (item or {}).items():
                text = text.replace(f"${{item.{field}}}", str(value))
            out[f"{name}@{key}"] = yaml.safe_load(text)
    return out


def stage_module(body: dict) -> str:
    """`python -m pipeline run <stage> [system]` -> pipeline.stages.<module>."""
    words = body["cmd"].split()
    assert words[:4] == ["python", "-m", "pipeline", "run"], body["cmd"]
    return f"pipeline.stages.{STAGE_MODULES[words[4]]}"


def covered(path: Path, deps: list[str]) -> bool:
    return any(path == Path(d) or Path(d) in path.parents for d in deps)


def code_dep_errors(spec: dict) -> list[str]:
    """What is wrong with the code deps of `spec` (a parsed dvc.yaml): project files a stage imports
    but does not list, and listed project paths that hold nothing it imports."""
    errors = []
    for name, body in stage_bodies(spec).items():
        closure = import_closure(stage_module(body))
        deps = [d for d in body["deps"] if d.startswith("pipeline/")]
        errors += [f"{name}: imports {p.as_posix()}, missing from its deps" for p in sorted(closure)
                   if not covered(p, deps)]
        errors += [f"{name}: lists {d}, which it does not import" for d in deps
                   if not any(p == Path(d) or Path(d) in p.parents for p in closure)]
    return errors


def test_dvc_yaml_is_what_the_stage_table_writes():
    assert (REPO_ROOT / "dvc.yaml").read_text() == render(), "run `python -m pipeline dvc-yaml`"


def test_every_stage_lists_exactly_its_import_closure():
    assert code_dep_errors(load_dvc_yaml()) == []


def test_a_removed_or_extra_dep_is_caught():
    spec = load_dvc_yaml()
    train = spec["stages"]["train"]["do"]
    retriever = "pipeline/retrieval/retriever.py"
    assert retriever in train["deps"]  # the Teacher loads the retriever through stages/inputs.py
    removed = copy.deepcopy(spec)
    removed["stages"]["train"]["do"]["deps"].remove(retriever)
    assert f"train@c_mas_rl: imports {retriever}, missing from its deps" in code_dep_errors(removed)
    extra = copy.deepcopy(spec)
    extra["stages"]["splits"]["deps"].append("pipeline/rl/trainer.py")
    assert "splits: lists pipeline/rl/trainer.py, which it does not import" in code_dep_errors(extra)


def test_function_level_imports_count():
    """stages/inputs.py imports the retriever inside open_retriever: still in the closure."""
    assert Path("pipeline/retrieval/retriever.py") in import_closure("pipeline.stages.validate_splits")
    assert Path("pipeline/agents/prompts.yaml") in import_closure("pipeline.stages.train")  # read beside prompts.py
    # the CLI's other commands (serve-retriever, train-verl) are not the stages' imports
    assert Path("pipeline/verl_agent/launch.py") not in import_closure("pipeline.stages.splits")


def test_the_report_reads_the_kept_draws_and_writes_the_draw_record():
    """Keeping a draw (scripts/draw.py) re-makes the report; the folder exists in a fresh clone
    of every profile that has a report (a README.md, since git keeps no empty folder)."""
    report = load_dvc_yaml()["stages"]["report"]
    assert "reports/${profile}/draws" in report["deps"]
    assert {"reports/${profile}/draw.json": {"cache": False}} in report["outs"]
    for profile in ("tiny", "ci"):
        assert (REPO_ROOT / "reports" / profile / "draws" / "README.md").is_file(), profile
