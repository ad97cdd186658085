"""An index built in one checkout opens in another at a different path, reached through a DVC
remote (a local folder): index.json names the encoder relative to the project root."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from pipeline.config import load_params
from pipeline.stage_io.inputs import open_retriever
from pipeline.stages.index import run_index

from .conftest import REPO_ROOT
from .test_retrieval import _tiny_bert


def _dvc(args: list[str], cwd: Path) -> str:
    dvc = Path(sys.executable).with_name("dvc")
    proc = subprocess.run([str(dvc) if dvc.exists() else "dvc", *args], cwd=cwd, capture_output=True, text=True)
    assert proc.returncode == 0, f"dvc {' '.join(args)}: {proc.stdout}{proc.stderr}"
    return proc.stdout


def test_index_built_in_one_checkout_opens_in_another(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    first, second, remote = tmp_path / "first", tmp_path / "elsewhere" / "second", tmp_path / "remote"
    first.mkdir()
    second.mkdir(parents=True)
    _tiny_bert(first / "models" / "e5")
    words = "the quick brown fox jumps over lazy dog near a river bank".split()
    rng = np.random.default_rng(0)
    corpus = pd.DataFrame([{"id": f"p{i}", "title": f"T{i}", "text": " ".join(rng.choice(words, 6))}
                           for i in range(30)])
    corpus["contents"] = '"' + corpus["title"] + '"\n' + corpus["text"]
    (first / "data" / "corpus").mkdir(parents=True)
    corpus.to_parquet(first / "data" / "corpus" / "passages.parquet")
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["ci"]["index"] = {"encoder": "models/e5", "batch_size": 8, "device": "cpu"}
    (first / "params.yaml").write_text(yaml.safe_dump(raw))
    run_index(load_params(first / "params.yaml", profile="ci"), first)
    assert json.loads((first / "data/index/index.json").read_text())["encoder"] == "models/e5"
    queries = list(corpus["text"][:5])
    expected = [[p.id for p in hits] for hits in open_retriever(first).search(queries, k=3)]

    _dvc(["init", "--no-scm"], first)
    _dvc(["remote", "add", "-d", "storage", str(remote)], first)
    _dvc(["add", "models/e5", "data/index"], first)
    _dvc(["push"], first)
    _dvc(["init", "--no-scm"], second)
    for carried in (".dvc/config", "models/e5.dvc", "data/index.dvc", "params.yaml"):  # what git carries
        (second / carried).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(first / carried, second / carried)
    _dvc(["pull"], second)
    shutil.rmtree(first)  # nothing of the first checkout is left to point at

    retriever = open_retriever(second)
    assert retriever.encoder.name == str(second / "models" / "e5")
    assert [[p.id for p in hits] for hits in retriever.search(queries, k=3)] == expected
