"""Search-R1 /retrieve API (good and bad requests) and the HTTP client against it."""

from __future__ import annotations

import hashlib
import json
import socket
import threading
import time

import numpy as np
import pandas as pd
import pytest
import uvicorn
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.retrieval.base import Passage, Retriever
from pipeline.retrieval.client import HttpRetriever, RetrievalError, parse_hit
from pipeline.retrieval.index import build_index
from pipeline.retrieval.retriever import DenseRetriever
from pipeline.retrieval.server import create_app

MAX_BATCH, MAX_K = 4, 5


class HashEncoder:
    """Deterministic bag-of-words encoder: fast stand-in for E5 in API tests."""

    name = "hash-test"
    dim = 64

    def _encode(self, texts) -> np.ndarray:
        out = np.zeros((len(texts), self.dim), np.float32)
        for row, text in enumerate(texts):
            for word in text.lower().replace('"', " ").split():
                out[row, int(hashlib.md5(word.encode()).hexdigest(), 16) % self.dim] += 1.0
        return out / np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-12)

    encode_queries = _encode
    encode_passages = _encode


@pytest.fixture(scope="module")
def retriever(tmp_path_factory) -> DenseRetriever:
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    frame = pd.DataFrame([{"id": str(i), "title": w.title(), "text": f"{w} facts and {w} stories"}
                          for i, w in enumerate(words)])
    out = tmp_path_factory.mktemp("srv") / "index"
    build_index(frame, HashEncoder(), out)
    return DenseRetriever.from_dir(out, encoder=HashEncoder())


@pytest.fixture(scope="module")
def client(retriever) -> TestClient:
    return TestClient(create_app(retriever, max_batch=MAX_BATCH, max_k=MAX_K),
                      raise_server_exceptions=False)


def test_retrieve_with_scores_has_search_r1_shape(client, retriever):
    resp = client.post("/retrieve", json={"queries": ["delta", "golf stories"], "topk": 2,
                                          "return_scores": True})
    assert resp.status_code == 200
    result = resp.json()["result"]
    assert len(result) == 2 and all(len(hits) == 2 for hits in result)
    hit = result[0][0]
    assert set(hit) == {"document", "score"} and set(hit["document"]) == {"id", "contents"}
    assert hit["document"] == {"id": "3", "contents": '"Delta"\ndelta facts and delta stories'}
    assert result[1][0]["document"]["id"] == "6"
    expected = retriever.search(["delta"], 2)[0]
    assert [h["score"] for h in result[0]] == pytest.approx([p.score for p in expected])


def test_retrieve_without_scores_returns_bare_documents(client):
    resp = client.post("/retrieve", json={"queries": ["echo"]})  # topk defaults to 3
    assert resp.status_code == 200
    hits = resp.json()["result"][0]
    assert len(hits) == 3
    assert all(set(h) == {"id", "contents"} for h in hits)
    assert hits[0]["id"] == "4"


def test_health(client):
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["count"] == 8 and body["encoder"] == "hash-test"


@pytest.mark.parametrize("body, status, needle", [
    ({"topk": 3}, 422, "queries"),
    ({"queries": "alpha"}, 422, "queries"),
    ({"queries": ["alpha", 3]}, 422, "queries.1"),
    ({"queries": ["alpha"], "topk": "3"}, 422, "topk"),
    ({"queries": ["alpha"], "topk": 2.5}, 422, "topk"),
    ({"queries": ["alpha"], "topk": 0}, 422, "topk must be in [1, 5]"),
    ({"queries": ["alpha"], "topk": MAX_K + 1}, 422, "topk must be in [1, 5]"),
    ({"queries": ["alpha"], "return_scores": "yes"}, 422, "return_scores"),
    ({"queries": []}, 422, "non-empty"),
    ({"queries": ["a"] * (MAX_BATCH + 1)}, 413, "max_batch"),
    ({"queries": ["a" * 5000]}, 422, "longer than"),
    (["alpha"], 422, "invalid request"),
])
def test_bad_requests_get_clear_4xx(client, body, status, needle):
    resp = client.post("/retrieve", json=body)
    assert resp.status_code == status
    assert needle in resp.json()["error"]


@pytest.mark.parametrize("raw", [b"{not json", b"", b"null", b'{"queries": ["a"]'])
def test_malformed_json_is_422(client, raw):
    resp = client.post("/retrieve", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 422
    assert resp.json()["error"].startswith("invalid request")


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10, 100) | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=6) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12)
bodies = st.fixed_dictionaries({}, optional={"queries": json_values, "topk": json_values,
                                             "return_scores": json_values}) | json_values


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(body=bodies)
def test_fuzzed_bodies_never_500(client, body):
    resp = client.post("/retrieve", content=json.dumps(body),
                       headers={"content-type": "application/json"})
    assert resp.status_code in (200, 400, 413, 422), resp.text
    if resp.status_code != 200:
        assert isinstance(resp.json()["error"], str)


# ---- client against a real uvicorn server -------------------------------------------------

@pytest.fixture(scope="module")
def server_url(retriever):
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(create_app(retriever, max_batch=MAX_BATCH, max_k=MAX_K),
                            host="127.0.0.1", port=port, log_level="warning")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=5)


def test_http_retriever_matches_local_retriever(server_url, retriever):
    with HttpRetriever(server_url, timeout=10) as remote:
        assert isinstance(remote, Retriever)
        queries = ["bravo", "hotel facts", "charlie stories"]
        got = remote.search(queries, k=3)
    want = retriever.search(queries, k=3)
    assert [[(p.id, p.title, p.text) for p in h] for h in got] == \
        [[(p.id, p.title, p.text) for p in h] for h in want]
    assert [p.score for p in got[0]] == pytest.approx([p.score for p in want[0]], abs=1e-6)


def test_http_retriever_reports_server_errors(server_url):
    with HttpRetriever(server_url + "/retrieve", timeout=10) as remote:
        assert remote.search([], k=3) == []
        with pytest.raises(RetrievalError, match="topk must be in"):
            remote.search(["alpha"], k=MAX_K + 1)
    with HttpRetriever("http://127.0.0.1:9", timeout=1) as dead:
        with pytest.raises(RetrievalError, match="request failed"):
            dead.search(["alpha"], k=1)


def test_parse_hit_accepts_both_search_r1_shapes():
    doc = {"id": "7", "contents": '"Golf"\ngolf facts'}
    assert parse_hit({"document": doc, "score": 0.5}) == Passage("7", "Golf", "golf facts", 0.5)
    assert parse_hit(doc) == Passage("7", "Golf", "golf facts", 0.0)
    with pytest.raises(RetrievalError, match="contents"):
        parse_hit({"document": {"id": "1"}})
