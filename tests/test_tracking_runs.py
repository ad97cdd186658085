"""What MLflow runs hold and how they open: the experiment's view, the commit tag, the logged
and registered model, audit and curves of a training run, the link from an evaluation to
the training run of its weights, the report with its figures, and docs/usage.md's search recipe
run through MLflow's API."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest

from pipeline.config import load_params
from pipeline.eval.synthetic import synthetic_records
from pipeline.provenance import git_commit
from pipeline.stage_io.run_logging import log_training, log_weights
from pipeline.stages.evaluate import evaluation_metrics, log_evaluation
from pipeline.stages.report import log_report
from pipeline.systems import TRAINED as TRAINED_SYSTEMS
from pipeline.tracking.artifacts import WEIGHTS_RUN_TAG
from pipeline.tracking.runs import EXPERIMENT_KIND, ensure_experiment, experiment_name, stage_run

from .conftest import REPO_ROOT

TRAINED = {s.train_stage: s.name for s in TRAINED_SYSTEMS}


@pytest.fixture()
def store(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setenv("MLFLOW_ARTIFACT_ROOT", (tmp_path / "artifacts").as_uri())
    monkeypatch.setenv("MAOPD_GIT_COMMIT", "c0ffee")
    from mlflow.tracking import MlflowClient

    return MlflowClient(f"sqlite:///{tmp_path}/mlflow.db")


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> Path:
    from pipeline.basemodel.tiny_model import build_tiny_qwen3
    from pipeline.basemodel.tokenizer import train_bpe_tokenizer
    from pipeline.policy.hf_backend import save_hf_folder

    texts = [f"Kalo{i} was born in Mira{i}." for i in range(50)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=300)
    model = build_tiny_qwen3(tokenizer, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
                             intermediate_size=32, max_position_embeddings=64, seed=0)
    return save_hf_folder(model, tokenizer, tmp_path_factory.mktemp("model") / "team")


def _params(max_mb: float):
    params = load_params(REPO_ROOT / "params.yaml", profile="ci")
    tracking = params.active.tracking.model_copy(update={"log_model_max_mb": max_mb})
    return params.model_copy(update={"active": params.active.model_copy(update={"tracking": tracking})})


def _audit(root: Path) -> Path:
    for step in (0, 5, 10):
        folder = root / f"step-{step:04d}"
        folder.mkdir(parents=True)
        pd.DataFrame({"role": ["searcher"], "reward": [0.5], "prompt_text": ["q"], "response_text": ["a" * 900]}
                     ).to_parquet(folder / "samples.parquet")
        pd.DataFrame({"sample_id": [0], "pos": [0]}).to_parquet(folder / "tokens.parquet")
    return root


def test_the_experiment_opens_in_the_model_training_view(tmp_path, store):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    ensure_experiment("ci", uri, (tmp_path / "a").as_uri())
    assert store.get_experiment_by_name(experiment_name("ci")).tags[EXPERIMENT_KIND[0]] == "custom_model_development"
    old = store.create_experiment(experiment_name("tiny"))  # made before the tag existed
    ensure_experiment("tiny", uri, (tmp_path / "a").as_uri())
    assert store.get_experiment(old).tags[EXPERIMENT_KIND[0]] == "custom_model_development"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                   capture_output=True)


def test_commit_tag_is_clean_when_only_dvc_written_files_changed(tmp_path, monkeypatch):
    monkeypatch.delenv("MAOPD_GIT_COMMIT", raising=False)
    (tmp_path / "pipeline").mkdir()
    (tmp_path / "reports" / "tiny").mkdir(parents=True)
    for rel in ("pipeline/a.py", "dvc.lock", "reports/tiny/paper.md", "params.yaml"):
        (tmp_path / rel).write_text("v1\n")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "commit", "-qm", "code")
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=tmp_path, capture_output=True, text=True,
                         check=True).stdout.strip()
    (tmp_path / "dvc.lock").write_text("v2\n")  # what `dvc repro` rewrites
    (tmp_path / "reports" / "tiny" / "paper.md").write_text("v2\n")
    assert git_commit(tmp_path) == sha
    (tmp_path / "pipeline" / "new.py").write_text("x = 1\n")  # code no commit holds
    assert git_commit(tmp_path) == f"{sha}-dirty"
    (tmp_path / "pipeline" / "new.py").unlink()
    (tmp_path / "params.yaml").write_text("v2\n")
    assert git_commit(tmp_path) == f"{sha}-dirty"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    _git(fresh, "init", "-q")
    assert git_commit(fresh) == "unknown"  # no commit yet


def test_training_run_logs_and_registers_its_model_audit_and_curves(tmp_path, store, model_folder):
    import shutil

    from pipeline.code_version import code_version
    from pipeline.draws.identity import cpu_kind, draw_tags
    from pipeline.stage_io.run_logging import DRAW_KEYS

    shutil.copyfile(REPO_ROOT / "params.yaml", tmp_path / "params.yaml")  # the draw's precision path is known
    with stage_run("train@multiagent_opd", "ci", tags={"system": "multiagent_opd"}, root=tmp_path) as mlf:
        for step in range(3):
            mlf.log_metrics({"dev_em": 0.1 * step, "reward_leader": step}, step=step)
        log_training(mlf, _params(50), tmp_path, model_folder, "multiagent_opd", "train@multiagent_opd",
                     _audit(tmp_path / "audit"))
        run_id = mlf.active_run().info.run_id
    run = store.get_run(run_id)
    assert run.data.tags["kind"] == "training" and run.data.tags["model_logged"].startswith("yes")
    artifacts = {a.path for a in store.list_artifacts(run_id)} | {a.path for a in store.list_artifacts(run_id, "audit")}
    assert {"curves.csv", "audit/step-0000", "audit/step-0010", "audit/samples_step-0010.csv"} <= artifacts
    assert "audit/step-0005" not in artifacts  # the first and the last audited step only
    curves = pd.read_csv(store.download_artifacts(run_id, "curves.csv", str(tmp_path / "dl")))
    assert curves.columns.tolist() == ["step", "dev_em", "reward_leader"] and len(curves) == 3
    (version,) = store.search_model_versions("name = 'multiagent_opd'")
    assert version.run_id == run_id
    # the version names the draw that made the weights, as the run does: seed set, CPU kind,
    # precision path and the code's fingerprint
    draw = draw_tags(tmp_path, "ci")
    assert draw["draw.cpu"] == cpu_kind() and draw["draw.precision"] in ("bf16", "float32", "mixed")
    assert version.tags == {"profile": "ci", "git_commit": "c0ffee", "stage": "train@multiagent_opd", **draw,
                            "draw.code": code_version()}
    assert {k: run.data.tags[k] for k in DRAW_KEYS} == {k: version.tags[k] for k in DRAW_KEYS}


def test_a_model_above_the_cap_is_not_logged(tmp_path, store, model_folder):
    with stage_run("base_model", "ci", root=tmp_path) as mlf:
        log_weights(mlf, _params(0), tmp_path, model_folder, "base_model", "base_model", kind="base_model")
        run_id = mlf.active_run().info.run_id
    assert store.get_run(run_id).data.tags["model_logged"].startswith("no:")
    assert store.search_registered_models() == []


def test_evaluation_links_to_the_run_of_its_weights_and_logs_records(tmp_path, store, model_folder):
    from pipeline.eval.run import model_fingerprint

    with stage_run("train@multiagent_opd", "ci", tags={"system": "multiagent_opd"}, root=tmp_path) as mlf:
        log_weights(mlf, _params(0), tmp_path, model_folder, "multiagent_opd", "train@multiagent_opd")
        trained = mlf.active_run().info.run_id
    records = tmp_path / "records.parquet"
    synthetic_records("multiagent_opd", 0.4, {"nq": 4}, seed=0).to_parquet(records)
    with stage_run("evaluate@multiagent_opd", "ci", tags={"system": "multiagent_opd"}, root=tmp_path) as mlf:
        log_evaluation(mlf, records, model_fingerprint(model_folder))
        evaluated = mlf.active_run().info.run_id
    run = store.get_run(evaluated)
    assert run.data.tags[WEIGHTS_RUN_TAG] == trained and run.data.tags["kind"] == "evaluation"
    assert [a.path for a in store.list_artifacts(evaluated, "records")] == ["records/records.parquet"]

    with stage_run("prompted_critic", "ci", tags={"system": "prompted_critic"}, root=tmp_path) as mlf:
        log_weights(mlf, _params(0), tmp_path, model_folder, "prompted_critic", "prompted_critic")  # same bytes
        twin = mlf.active_run().info.run_id
    for system, expected in (("multiagent_opd", trained), ("prompted_critic", twin)):
        with stage_run(f"evaluate@{system}", "ci", tags={"system": system}, root=tmp_path) as mlf:
            log_evaluation(mlf, records, model_fingerprint(model_folder), system)
            evaluated = mlf.active_run().info.run_id
        assert store.get_run(evaluated).data.tags[WEIGHTS_RUN_TAG] == expected, system


def test_report_run_holds_the_page_with_its_figures(tmp_path, store):
    folder = tmp_path / "reports" / "ci"
    (folder / "figures").mkdir(parents=True)
    (folder / "figures" / "a.png").write_bytes(b"\x89PNG fake")
    (folder / "paper.html").write_text('<img src="figures/a.png">')
    (tmp_path / "metrics.json").write_text("{}")
    with stage_run("report", "ci", root=tmp_path) as mlf:
        log_report(mlf, folder, tmp_path / "metrics.json")
        run_id = mlf.active_run().info.run_id
    paths = {a.path for a in store.list_artifacts(run_id)} | {a.path for a in store.list_artifacts(run_id, "figures")}
    assert {"paper.html", "metrics.json", "figures/a.png"} <= paths
    logged = Path(store.download_artifacts(run_id, "paper.html", str(tmp_path))).read_text()
    assert logged == '<img src="data:image/png;base64,iVBORyBmYWtl">'  # embedded for MLflow's artifact view
    assert (folder / "paper.html").read_text() == '<img src="figures/a.png">'  # the page on disk links it


def _readme_recipe() -> tuple[list[str], list[str]]:
    """The search filters and the evaluation metric names of docs/usage.md's MLflow section."""
    text = (REPO_ROOT / "docs" / "usage.md").read_text()
    section = text[text.index("## MLflow: runs, comparisons"):text.index("## Checking the pages in a browser")]
    filters = re.findall(r"[Ss]earch runs with `([^`]+)`", section)
    metrics = re.findall(r"`(\w+_at_4)`", section)
    return filters, metrics


def test_the_readme_comparison_recipe_runs_through_mlflows_search(tmp_path, store, model_folder):
    filters, metric_names = _readme_recipe()
    assert len(filters) == 2 and metric_names, "docs/usage.md's MLflow recipe changed shape"
    with stage_run("base_model", "ci", root=tmp_path) as mlf:
        log_weights(mlf, _params(0), tmp_path, model_folder, "base_model", "base_model", kind="base_model")
    for stage, system in TRAINED.items():
        with stage_run(stage, "ci", tags={"system": system}, root=tmp_path) as mlf:
            log_weights(mlf, _params(0), tmp_path, model_folder, system, stage)
    records = tmp_path / "records.parquet"
    for i, system in enumerate(["multiagent_opd", "c_mas_rl"]):
        frame = synthetic_records(system, 0.4, {"nq": 4, "hotpotqa": 4}, seed=i)
        frame.to_parquet(records)
        with stage_run(f"evaluate@{system}", "ci", tags={"system": system}, root=tmp_path) as mlf:
            mlf.log_metrics(evaluation_metrics(frame, runs=4))
            log_evaluation(mlf, records, "unknown-weights")
    with stage_run("report", "ci", root=tmp_path):
        pass
    experiment = store.get_experiment_by_name(experiment_name("ci")).experiment_id
    training, evaluation = (store.search_runs([experiment], f) for f in filters)
    assert {r.info.run_name for r in training} == set(TRAINED)
    assert {r.info.run_name for r in evaluation} == {"evaluate@multiagent_opd", "evaluate@c_mas_rl"}
    for run in evaluation:
        assert set(metric_names) <= set(run.data.metrics), sorted(run.data.metrics)


def test_printed_experiment_links_open_the_runs_table_in_the_training_view(tmp_path, store, monkeypatch):
    from flask import Flask

    from pipeline.tracking.links import experiment_links
    from pipeline.tracking.server import register

    monkeypatch.setenv("MLFLOW_UI_URL", "http://127.0.0.1:5000/")
    ensure_experiment("tiny", f"sqlite:///{tmp_path}/mlflow.db", (tmp_path / "a").as_uri())
    experiment = store.get_experiment_by_name(experiment_name("tiny")).experiment_id
    (line,) = experiment_links(f"sqlite:///{tmp_path}/mlflow.db")
    assert line == "multiagent-opd-tiny: http://127.0.0.1:5000/maopd/experiments/multiagent-opd-tiny"
    answer = register(Flask("t"), f"sqlite:///{tmp_path}/mlflow.db").test_client().get(
        line.split("http://127.0.0.1:5000")[1])  # what `make mlflow-ui`'s server does with it
    assert answer.headers["Location"] == f"/#/experiments/{experiment}/runs?workflowType=machine_learning"
