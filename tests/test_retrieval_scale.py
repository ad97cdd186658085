"""Retrieval at the paper's scale, checked on CPU: IVF / IVF-PQ indexes against the exact flat
index (recall@k), their settings validated with the key named, search settings carried by
index.json, the `index` stage wiring, and the E5 encoder's device and float16 choices.
faiss-gpu and CUDA paths are not run here (no GPU)."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path

import faiss
import numpy as np
import pandas as pd
import pytest
import yaml

from pipeline.config import IndexParams, load_params
from pipeline.errors import ConfigError, InputError
from pipeline.retrieval.encoders import encoder_dtype, make_encoder, resolve_device
from pipeline.retrieval.faiss_index import use_gpu
from pipeline.retrieval.index import build_index, load_index, open_flashrag_index
from pipeline.retrieval.index_spec import IndexSpec
from pipeline.retrieval.retriever import DenseRetriever

REPO = Path(__file__).resolve().parents[1]
REAL = REPO.parent / "shared" / "data" / "real" / "flashrag"
DIM, CLUSTERS, PER_CLUSTER = 32, 40, 50


@pytest.fixture(scope="module", autouse=True)
def one_faiss_thread():
    """k-means on a few thousand vectors: OpenMP threads only spin on a shared 2-core machine."""
    threads = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(threads)


class VectorEncoder:
    """Encoder double: each passage's precomputed vector, looked up by its contents."""

    name = "vectors"

    def __init__(self, contents: list[str], vectors: np.ndarray) -> None:
        self.dim = vectors.shape[1]
        self.by_text = dict(zip(contents, vectors))
        self.calls = 0

    def encode_passages(self, texts):
        self.calls += len(texts)
        return np.stack([self.by_text[t.removeprefix("passage: ")] for t in texts])

    def encode_queries(self, texts):
        raise AssertionError("tests search with vectors")


def around(centres: np.ndarray, per_centre: int, spread: float, seed: int) -> np.ndarray:
    """Unit vectors scattered around `centres`: the shape of real embedding clouds."""
    noise = np.random.default_rng(seed).normal(size=(len(centres) * per_centre, centres.shape[1]))
    points = np.repeat(centres, per_centre, axis=0) + spread * noise
    return (points / np.linalg.norm(points, axis=1, keepdims=True)).astype(np.float32)


@pytest.fixture(scope="module")
def corpus():
    centres = np.random.default_rng(0).normal(size=(CLUSTERS, DIM))
    vectors = around(centres, PER_CLUSTER, 0.35, seed=1)
    frame = pd.DataFrame({"id": [f"p{i}" for i in range(len(vectors))],
                          "title": [f"T{i}" for i in range(len(vectors))],
                          "text": [f"passage number {i}" for i in range(len(vectors))]})
    contents = [f'"{t}"\n{x}' for t, x in zip(frame["title"], frame["text"])]
    return frame, VectorEncoder(contents, vectors), around(centres, 2, 0.35, seed=2)


def top_ids(index_dir: Path, queries: np.ndarray, k: int) -> list[list[str]]:
    retriever = DenseRetriever.from_loaded(load_index(index_dir), encoder=None)
    return [[p.id for p in hits] for hits in retriever.search_vectors(queries, k)]


def recall(found: list[list[str]], exact: list[list[str]]) -> float:
    return float(np.mean([len(set(f) & set(e)) / len(e) for f, e in zip(found, exact)]))


@pytest.fixture(scope="module")
def flat(corpus, tmp_path_factory):
    frame, encoder, queries = corpus
    out = tmp_path_factory.mktemp("flat") / "index"
    meta = build_index(frame, encoder, out, batch_size=256)
    return out, meta, top_ids(out, queries, 10)


def build_ivf(corpus, out: Path, **spec) -> dict:
    frame, encoder, _ = corpus
    return build_index(frame, encoder, out, batch_size=256, spec=IndexSpec(**spec), seed=3)


def test_flat_default_keeps_its_meta(flat):
    _, meta, _ = flat
    assert meta == {"encoder": "vectors", "dim": DIM, "count": CLUSTERS * PER_CLUSTER, "metric": "ip",
                    "index_type": "IndexFlatIP"}


def test_ivf_scanning_every_cell_is_exact(corpus, flat, tmp_path):
    _, _, exact = flat
    meta = build_ivf(corpus, tmp_path / "ivf", kind="ivf", nlist=32, nprobe=32)
    assert top_ids(tmp_path / "ivf", corpus[2], 10) == exact
    assert meta["index_type"] == "IndexIVFFlat" and meta["nlist"] == 32 and meta["nprobe"] == 32
    assert meta["train_size"] == min(64 * 32, CLUSTERS * PER_CLUSTER)


def test_ivf_recall_grows_with_nprobe_and_is_high(corpus, flat, tmp_path):
    _, _, exact = flat
    recalls = {}
    for nprobe in (1, 4, 16):
        out = tmp_path / f"ivf{nprobe}"
        build_ivf(corpus, out, kind="ivf", nlist=32, nprobe=nprobe, train_size=1000)
        loaded = load_index(out)
        assert faiss.extract_index_ivf(loaded.index).nprobe == nprobe  # index.json's nprobe is applied
        recalls[nprobe] = recall(top_ids(out, corpus[2], 10), exact)
    assert recalls[1] <= recalls[4] <= recalls[16]
    assert recalls[1] < 1.0  # a single cell really is approximate here ...
    assert recalls[4] >= 0.9 and recalls[16] >= 0.99  # ... and a few cells are nearly exact


def test_ivfpq_recall_is_sane(corpus, flat, tmp_path):
    _, _, exact = flat
    meta = build_ivf(corpus, tmp_path / "pq", kind="ivfpq", nlist=16, nprobe=16, pq_m=32, pq_bits=4,
                     train_size=2000)
    assert meta["index_type"] == "IndexIVFPQ" and (meta["pq_m"], meta["pq_bits"]) == (32, 4)
    # compressed scores reorder close neighbours, yet most of the exact top-10 is found (random: 0.005)
    assert recall(top_ids(tmp_path / "pq", corpus[2], 10), exact) >= 0.55


def test_ivf_trains_on_a_sample_and_adds_everything(corpus, tmp_path):
    frame, encoder, _ = corpus
    encoder.calls = 0
    meta = build_ivf(corpus, tmp_path / "ivf", kind="ivf", nlist=8, nprobe=2, train_size=300)
    assert encoder.calls == 300 + len(frame)
    assert meta["count"] == len(frame) == load_index(tmp_path / "ivf").index.ntotal


@pytest.mark.parametrize("spec, key", [
    ({"kind": "ivf", "nlist": 8, "nprobe": 9}, "index.nprobe"),
    ({"kind": "ivf", "nlist": 8}, "index.nprobe"),
    ({"kind": "ivf", "nprobe": 1}, "index.nlist"),
    ({"kind": "flat", "nlist": 8}, "index.nlist"),
    ({"kind": "ivf", "nlist": 8, "nprobe": 2, "train_size": 4}, "index.train_size"),
    ({"kind": "ivfpq", "nlist": 8, "nprobe": 2}, "index.pq_m"),
    ({"kind": "ivf", "nlist": 8, "nprobe": 2, "pq_m": 4}, "index.pq_m"),
    ({"kind": "hnsw"}, "index.kind"),
])
def test_impossible_specs_name_the_key(spec, key):
    with pytest.raises(InputError, match=key):
        IndexSpec(**spec)


@pytest.mark.parametrize("spec, key", [
    ({"kind": "ivf", "nlist": 5000, "nprobe": 2}, "index.nlist: expected at most the number of passages \\(2000\\)"),
    ({"kind": "ivfpq", "nlist": 8, "nprobe": 2, "pq_m": 5},
     "index.pq_m: expected a divisor of the vector dimension 32"),
    ({"kind": "ivfpq", "nlist": 8, "nprobe": 2, "pq_m": 4, "train_size": 100}, "index.pq_bits"),
])
def test_settings_impossible_for_this_corpus_stop_the_build(corpus, tmp_path, spec, key):
    with pytest.raises(InputError, match=key):
        build_ivf(corpus, tmp_path / "bad", **spec)
    assert not (tmp_path / "bad").exists()


def test_index_json_with_a_bad_nprobe_is_refused(corpus, tmp_path):
    build_ivf(corpus, tmp_path / "ivf", kind="ivf", nlist=8, nprobe=2)
    meta_path = tmp_path / "ivf" / "index.json"
    meta_path.write_text(json.dumps({**json.loads(meta_path.read_text()), "nprobe": 9}))
    with pytest.raises(InputError, match="nprobe 9 outside 1..nlist \\(8\\)"):
        load_index(tmp_path / "ivf")


# -- params ---------------------------------------------------------------------------------------
def write_params(tmp_path: Path, profile: str, **index) -> Path:
    raw = yaml.safe_load((REPO / "params.yaml").read_text())
    raw[profile]["index"].update(index)
    path = tmp_path / "params.yaml"
    path.write_text(yaml.safe_dump(raw))
    return path


def test_params_reject_nprobe_above_nlist_naming_the_key(tmp_path):
    path = write_params(tmp_path, "paper", kind="ivf", nlist=1024, nprobe=2048)
    with pytest.raises(ConfigError, match=r"paper\.index: .*index\.nprobe: expected at most index\.nlist \(1024\)"):
        load_params(path, profile="tiny")  # every profile is checked, not only the active one
    with pytest.raises(ConfigError, match=r"ci\.index\.device"):
        load_params(write_params(tmp_path, "ci", device="tpu"))


def test_tiny_and_ci_stay_flat_and_the_paper_is_exact_on_gpu():
    for profile in ("tiny", "ci"):
        spec = load_params(REPO / "params.yaml", profile=profile).index.spec()
        assert spec == IndexSpec()
    paper = load_params(REPO / "params.yaml", profile="paper").index
    assert paper.spec().kind == "flat" and paper.gpu_fp16 and paper.device == "auto"
    assert IndexParams(encoder="e", batch_size=1, kind="ivf", nlist=4, nprobe=2).spec().factory() == "IVF4,Flat"


class RunRecorder:
    """Stands in for pipeline.tracking.runs.stage_run: records what the stage logs."""

    def __init__(self) -> None:
        self.params: dict = {}
        self.metrics: dict = {}

    @contextlib.contextmanager
    def __call__(self, stage, profile, params=None, **kwargs):
        self.params[stage] = dict(params or {})
        yield self

    def log_metrics(self, metrics: dict) -> None:
        self.metrics.update(metrics)


def test_the_index_stage_builds_what_params_ask_for(tmp_path, monkeypatch):
    from pipeline.stages import index as data_stages

    runs = RunRecorder()
    monkeypatch.setattr(data_stages, "stage_run", runs)
    from tests.test_retrieval import _tiny_bert

    _tiny_bert(tmp_path / "models" / "e5")  # a small HF E5 stand-in: fast on a shared CPU
    rng = np.random.default_rng(0)
    vocab = "the quick brown fox jumps over lazy dog near a river bank".split()
    corpus = pd.DataFrame([{"id": f"p{i}", "title": f"T{i}", "text": " ".join(rng.choice(vocab, 8))}
                           for i in range(40)])
    corpus["contents"] = '"' + corpus["title"] + '"\n' + corpus["text"]
    (tmp_path / "data" / "corpus").mkdir(parents=True)
    corpus.to_parquet(tmp_path / "data" / "corpus" / "passages.parquet")
    path = write_params(tmp_path, "ci", encoder="models/e5", device="cpu", kind="ivf", nlist=4, nprobe=4,
                        train_size=20)
    info = data_stages.run_index(load_params(path, profile="ci"), tmp_path)
    assert runs.params["index"]["kind"] == "ivf" and runs.metrics["passages"] == len(corpus)
    assert runs.params["index"]["encoder_used"] == "models/e5"  # the encoder that ran, as index.json names it
    meta = json.loads((tmp_path / "data" / "index" / "index.json").read_text())
    assert info == meta and meta["index_type"] == "IndexIVFFlat" and meta["nprobe"] == 4
    assert meta["train_size"] == 20 and meta["count"] == len(corpus)
    assert meta["encoder"] == "models/e5"  # relative to the root: other checkouts open it too
    retriever = DenseRetriever.from_dir(tmp_path / "data" / "index", root=tmp_path)  # encoder from index.json
    queries = list(corpus["text"][:10])
    hits = retriever.search(queries, k=3)
    scores = retriever.encoder.encode_queries(queries) @ retriever.encoder.encode_passages(list(corpus["contents"])).T
    expected = [[f"p{i}" for i in np.argsort(-row, kind="stable")[:3]] for row in scores]
    assert [[p.id for p in h] for h in hits] == expected  # all 4 cells scanned: exactly brute force


# -- real e5-base-v2 vectors (FlashRAG sample) ----------------------------------------------------
def test_ivf_on_real_e5_vectors(tmp_path):
    index_path, corpus_path = REAL / "wiki18_sample_e5_flat.index", REAL / "wiki18_sample_corpus.jsonl"
    if not (index_path.is_file() and corpus_path.is_file()):
        pytest.skip(f"real FlashRAG sample not present under {REAL}")
    loaded = open_flashrag_index(index_path, corpus_path)
    vectors = np.stack([loaded.index.reconstruct(i) for i in range(loaded.index.ntotal)])
    frame = loaded.passages.to_pandas()
    contents = [f'"{t}"\n{x}' for t, x in zip(frame["title"], frame["text"])]
    encoder = VectorEncoder(contents, vectors)
    queries = vectors[::25] + 0.02 * np.random.default_rng(0).normal(size=vectors[::25].shape).astype(np.float32)
    exact_dir, ivf_dir = tmp_path / "flat", tmp_path / "ivf"
    build_index(frame, encoder, exact_dir, batch_size=500)
    build_index(frame, encoder, ivf_dir, batch_size=500, spec=IndexSpec(kind="ivf", nlist=16, nprobe=4))
    exact = top_ids(exact_dir, queries, 3)
    assert [e[0] for e in exact] == [str(frame["id"][i]) for i in range(0, len(frame), 25)]
    assert recall(top_ids(ivf_dir, queries, 3), exact) >= 0.8


# -- the E5 encoder's device --------------------------------------------------------------------
def test_device_choice():
    assert resolve_device("auto", cuda_available=False) == "cpu"
    assert resolve_device("auto", cuda_available=True) == "cuda"
    assert resolve_device("cuda", cuda_available=True) == "cuda"
    with pytest.raises(InputError, match="index.device: 'cuda' asked for, but torch sees no CUDA device"):
        resolve_device("cuda", cuda_available=False)
    assert encoder_dtype("cuda") == "float16" and encoder_dtype("cpu") == "float32"
    assert encoder_dtype("cuda", "float32") == "float32"


def test_hf_e5_in_float16_stays_close_to_float32(tmp_path):
    from pipeline.retrieval.encoders import HFE5Encoder
    from tests.test_retrieval import _tiny_bert

    _tiny_bert(tmp_path)
    full = make_encoder(str(tmp_path))
    assert full.device == "cpu" and full.dtype == "float32"  # auto, on this CPU-only machine
    half = HFE5Encoder(tmp_path, device="cpu", dtype="float16")
    assert next(half.model.parameters()).dtype.is_floating_point and half.dtype == "float16"
    texts = ["the quick brown fox", "a lazy dog near the river bank"]
    a, b = full.encode_passages(texts), half.encode_passages(texts)
    assert b.dtype == np.float32 and np.allclose(np.linalg.norm(b, axis=1), 1.0, atol=1e-5)
    assert np.min(np.sum(a * b, axis=1)) > 0.99 and not np.array_equal(a, b)


@pytest.mark.skipif(not use_gpu(), reason="faiss-gpu sees no GPU here")
def test_gpu_fp16_flat_search_matches_cpu(corpus, flat, tmp_path):
    frame, encoder, queries = corpus
    build_index(frame, encoder, tmp_path / "gpu", spec=IndexSpec(gpu_fp16=True))
    assert recall(top_ids(tmp_path / "gpu", queries, 10), flat[2]) >= 0.99
