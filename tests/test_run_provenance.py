"""Every number from its own run: the commit the stages' code came from, each stage's record of its
MLflow run (data/runs/), the training curves as stage outputs, and draws known by their models."""

from __future__ import annotations

import copy
import json
import subprocess

import pandas as pd
import pytest

from pipeline.draws.record import check_distinct, load_kept, same_models
from pipeline.draws.workspace import keep_draw
from pipeline.errors import InputError
from pipeline.provenance import code_paths, git_commit
from pipeline.report import across_draws as ad
from pipeline.report.curves import CURVE_METRICS, read_stage_curves, stage_curves_path, write_stage_curves
from pipeline.tracking.stage_record import StageRecord, joint_identity, read_record, record_path, write_record


def _git(root, *args):
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"})


# --------------------------------------------------------------------------- provenance


@pytest.fixture
def checkout(tmp_path, monkeypatch):
    monkeypatch.delenv("MAOPD_GIT_COMMIT", raising=False)
    for rel, text in {"pipeline/stages/a.py": "x = 1\n", "pipeline/unused.py": "y = 1\n", "params.yaml": "a: 1\n",
                      "docs/usage.md": "doc\n", "README.md": "readme\n", "tests/test_a.py": "t\n",
                      "dvc.yaml": "stages:\n  a:\n    cmd: run a\n    deps:\n    - data/splits\n"
                                  "    - pipeline/stages/a.py\n  b:\n    foreach: {x: 1}\n    do:\n"
                                  "      cmd: run b\n      deps:\n      - data/models/${key}\n"
                                  "      - pipeline/stages/a.py\n"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "code")
    return tmp_path


def test_the_commit_describes_the_stages_deps_not_the_docs(checkout):
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=checkout, capture_output=True, text=True).stdout.strip()
    assert code_paths(checkout) == ["dvc.yaml", "params.yaml", "pipeline/stages/a.py"]
    for rel in ("docs/usage.md", "README.md", "tests/test_a.py", "pipeline/unused.py"):  # no stage reads them
        (checkout / rel).write_text("edited\n")
    (checkout / "docs" / "new.md").write_text("new page\n")
    assert git_commit(checkout) == sha
    (checkout / "pipeline" / "stages" / "a.py").write_text("x = 2\n")
    assert git_commit(checkout) == f"{sha}-dirty"
    _git(checkout, "checkout", "--", "pipeline/stages/a.py")
    (checkout / "params.yaml").write_text("a: 2\n")
    assert git_commit(checkout) == f"{sha}-dirty"


def test_without_a_dvc_yaml_the_whole_package_counts(checkout):
    (checkout / "dvc.yaml").unlink()
    _git(checkout, "commit", "-qam", "no dag")
    (checkout / "pipeline" / "unused.py").write_text("y = 2\n")
    assert git_commit(checkout).endswith("-dirty")


# --------------------------------------------------------------------------- stage records


def _record(stage="train@multiagent_opd", run_id="r1", cpu="Xeon, family 6 model 207", **extra) -> StageRecord:
    values = dict(stage=stage, run_id=run_id, experiment_id="1", experiment="multiagent-opd-ci", profile="ci",
                  seed_set="A", cpu=cpu, precision="bf16", commit="abc", code="0123", threads="2")
    return StageRecord(**(values | extra))


def test_a_stage_record_round_trips_and_bad_files_are_named(tmp_path):
    record = _record()
    path = write_record(tmp_path, record)
    assert path == record_path(tmp_path, "train@multiagent_opd") == tmp_path / "data/runs/train/multiagent_opd.json"
    assert record_path(tmp_path, "report") == tmp_path / "data/runs/report.json"
    assert read_record(tmp_path, "train@multiagent_opd") == record
    assert read_record(tmp_path, "train@c_mas_rl") is None
    path.write_text("{not json")
    with pytest.raises(InputError, match=r"multiagent_opd\.json: not valid JSON"):
        read_record(tmp_path, "train@multiagent_opd")
    path.write_text(json.dumps({"schema": 1, **record.__dict__, "run_id": 7}))
    with pytest.raises(InputError, match=r"multiagent_opd\.json: field 'run_id': expected a string"):
        read_record(tmp_path, "train@multiagent_opd")


def test_the_identity_comes_from_the_stages_and_says_mixed_when_they_differ():
    one = {"a": _record("a"), "b": _record("b")}
    assert joint_identity(one) == {"seed_set": "A", "cpu": "Xeon, family 6 model 207", "precision": "bf16",
                                   "threads": "2"}
    mixed = joint_identity({**one, "c": _record("c", cpu="EPYC, family 25 model 17")})
    assert mixed["cpu"] == "mixed: EPYC, family 25 model 17; Xeon, family 6 model 207"
    assert joint_identity({}) == {"seed_set": "unknown", "cpu": "unknown", "precision": "unknown",
                                  "threads": "unknown"}
    other = joint_identity({**one, "c": _record("c", threads_label="4 (profile: 2)")})
    assert other["threads"] == "mixed: 2; 4 (profile: 2)"  # a stage run with other threads is another draw


# --------------------------------------------------------------------------- curves as stage outputs


def test_a_training_stages_curves_file_keeps_its_history_exactly(tmp_path):
    history = [{"step": 0, "dev_em": 0.1, "dev_searcher_kl": 0.0123456789012345678, "seconds": 4.0},
               {"step": 1, "entropy": 1.5, "clip_fraction": 0.25},
               {"step": 1, "entropy": 1.25},  # logged again after a resume: the last value counts
               {"step": 2, "dev_em": 0.3}]
    path = stage_curves_path(tmp_path, "multiagent_opd")
    rows = write_stage_curves(path, history, {"dev_em": 16, "entropy": 8})
    assert rows == 5  # no `seconds`: only the report's curve metrics
    first = path.read_bytes()
    write_stage_curves(path, history, {"dev_em": 16, "entropy": 8})
    assert path.read_bytes() == first
    curve = read_stage_curves(path, "multiagent_opd", "run-1")
    assert curve.run_id == "run-1" and curve.questions["dev_em"] == 16 and curve.questions["clip_fraction"] is None
    assert curve.points("entropy").values.tolist() == [[1, 1.25]]
    assert curve.points("dev_searcher_kl")["dev_searcher_kl"].iloc[0] == 0.0123456789012345678  # to the bit
    assert list(curve.frame.columns) == ["step", *[m.key for m in CURVE_METRICS if m.key in curve.frame]]
    path.write_text("step,value\n1,2\n")
    with pytest.raises(InputError, match=r"multiagent_opd\.csv: columns \['metric', 'questions'\] missing"):
        read_stage_curves(path, "multiagent_opd")


# --------------------------------------------------------------------------- one set of models, one draw


def _draw(name: str, models: dict | None, score: float = 30.0) -> dict:
    record = {"schema": 1, "profile": "ci", "seed_set": "A", "cpu": "Xeon", "precision": "bf16", "test_questions": 32,
              "runs": 4, "level": 95, "systems": {"c_mas_base": score}, "forced_answer_share": {}, "comparisons": {},
              "dev_searcher_kl": {}, "dedup": None, "name": name}
    if models is not None:
        record["hashes"] = {"models": models, "records": {"c_mas_base": "r" * 64}}
    return record


def test_two_kept_records_of_the_same_models_are_refused_naming_both(tmp_path):
    folder = tmp_path / "draws"
    folder.mkdir()
    (folder / "A-xeon-167.json").write_text(json.dumps(_draw("A-xeon-167", {"base": "1", "c_mas_rl": "2"})))
    (folder / "A-xeon-207.json").write_text(json.dumps(_draw("A-xeon-207", {"base": "1", "c_mas_rl": "2"}, 31.0)))
    (folder / "old.json").write_text(json.dumps(_draw("old", None)))  # kept before hashes: never matched
    with pytest.raises(InputError, match=r"A-xeon-207\.json: the same models .* as the kept draw A-xeon-167 "):
        load_kept(folder, "ci")
    (folder / "A-xeon-207.json").unlink()
    assert [p.name for p, _ in load_kept(folder, "ci")] == ["A-xeon-167.json", "old.json"]
    check_distinct([(folder / "x.json", _draw("x", None)), (folder / "y.json", _draw("y", None))])


def test_keep_refuses_a_second_record_of_the_same_models_naming_the_first(tmp_path):
    root, workspace = tmp_path / "root", tmp_path / "ws"
    (workspace / "reports" / "ci").mkdir(parents=True)
    kept = _draw("A-xeon-167", {"base": "1"})
    (root / "reports" / "ci" / "draws").mkdir(parents=True)
    (root / "reports" / "ci" / "draws" / "A-xeon-167.json").write_text(json.dumps(kept))
    report = {k: v for k, v in _draw("x", {"base": "1"}, 99.0).items() if k != "name"}
    (workspace / "reports" / "ci" / "draw.json").write_text(json.dumps(report))
    with pytest.raises(InputError, match=r"same models .* as the kept draw A-xeon-167"):
        keep_draw(workspace, root, "ci", name="A-xeon-207")
    assert not (root / "reports" / "ci" / "draws" / "A-xeon-207.json").exists()
    report["hashes"]["models"] = {"base": "other"}
    (workspace / "reports" / "ci" / "draw.json").write_text(json.dumps(report))
    assert keep_draw(workspace, root, "ci", name="A-xeon-207").is_file()


def test_this_run_is_the_kept_record_of_its_models_not_of_its_scores():
    this_run = _draw("this", {"base": "1"})
    this_run["funnel"] = {"rates": {"c_mas_base": {"handed": 50.0}}, "comparisons": {}}
    equal_scores = _draw("G-other-models", {"base": "9"})  # the very same scores, other models
    rows = ad.draw_rows([("G-other-models", equal_scores)], this_run, "abc")
    assert [(r.label, r.this_run) for r in rows] == [("G-other-models", False), ("this run", True)]
    same_models_older = copy.deepcopy(_draw("A-kept", {"base": "1"}, 10.0))
    rows = ad.draw_rows([("A-kept", same_models_older)], this_run, "abc")
    assert [r.label for r in rows] == ["A-kept (this run)"]
    assert rows[0].record["systems"] == this_run["systems"] and rows[0].record["funnel"] == this_run["funnel"]
    assert rows[0].record["name"] == "A-kept"
    assert not same_models(_draw("a", None), _draw("b", None))


def test_curves_are_read_from_the_stage_files_whatever_mlflow_holds(tmp_path):
    """The report's curves come from data/curves/, with the run id of the stage's record."""
    from pipeline.report.build import read_curves

    write_stage_curves(stage_curves_path(tmp_path, "multiagent_opd"), [{"step": 0, "dev_em": 0.5}], {"dev_em": 4})
    record = _record(run_id="made-it")
    curves = read_curves(tmp_path, {"train@multiagent_opd": record})
    assert list(curves) == ["multiagent_opd"] and curves["multiagent_opd"].run_id == "made-it"
    assert curves["multiagent_opd"].frame.equals(pd.DataFrame({"step": [0], "dev_em": [0.5]}))


def test_a_draw_kept_before_hashes_takes_them_only_from_a_run_that_re_made_it(tmp_path):
    from pipeline.draws.workspace import attach_hashes

    root, source = tmp_path / "root", tmp_path / "source"
    (root / "reports" / "ci" / "draws").mkdir(parents=True)
    (source / "reports" / "ci").mkdir(parents=True)
    (root / "reports" / "ci" / "draws" / "A-old.json").write_text(json.dumps(_draw("A-old", None)))
    remade = {k: v for k, v in _draw("x", {"base": "1"}).items() if k != "name"}
    (source / "reports" / "ci" / "draw.json").write_text(json.dumps(remade | {"systems": {"c_mas_base": 29.0}}))
    with pytest.raises(InputError, match=r"A-old\.json: fields systems differ"):
        attach_hashes(root, "ci", "A-old", source)
    (source / "reports" / "ci" / "draw.json").write_text(json.dumps(remade))
    path = attach_hashes(root, "ci", "A-old", source)
    assert json.loads(path.read_text())["hashes"] == remade["hashes"]
    (root / "reports" / "ci" / "draws" / "B-old.json").write_text(json.dumps(_draw("B-old", None)))
    with pytest.raises(InputError, match=r"B-old\.json: the kept draw A-old .* already holds these model hashes"):
        attach_hashes(root, "ci", "B-old", source)
