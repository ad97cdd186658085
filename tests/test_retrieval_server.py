"""Search-R1 /retrieve API (good and bad requests, faults of the server's own files) and the
HTTP client against it."""

from __future__ import annotations

import hashlib
import json
import logging

import faiss
import numpy as np
import pandas as pd
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline.retrieval.base import Passage, Retriever
from pipeline.retrieval.client import HttpRetriever, RetrievalError, parse_hit
from pipeline.retrieval.contents import join_contents
from pipeline.retrieval.index import build_index
from pipeline.retrieval.retriever import DenseRetriever
from pipeline.retrieval.server import create_app

from .helpers.live_server import live_server

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


DEEP = 100_000


@pytest.mark.parametrize("raw, needle", [
    (b'{"queries": ["alpha"], "topk": ' + b"9" * 5000 + b"}", "a number of 5000 digits exceeds max_number_digits=100"),
    (b'{"queries": ["alpha"], "seen_at": ' + b"1" * 5000 + b"}", "max_number_digits=100"),
    (b'{"queries": ' + b"[" * DEEP + b"]" * DEEP + b"}", "nested more than 32 levels deep (max_json_depth=32)"),
    (b'{"queries": ["alpha"], "extra": ' + b"[" * DEEP + b"]" * DEEP + b"}", "max_json_depth=32"),
    (b'{"queries": ["alpha"], "extra": ' + b'{"a": ' * DEEP + b"1" + b"}" * DEEP + b"}", "max_json_depth=32"),
])
def test_the_probes_huge_numbers_and_deep_nesting_are_422(client, raw, needle):
    resp = client.post("/retrieve", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 422, resp.text[:300]
    assert needle in resp.json()["error"]
    assert client.get("/health").status_code == 200


def test_json_bounds_are_in_health_and_hold_at_their_edge(client):
    health = client.get("/health").json()
    assert health["max_json_depth"] == 32 and health["max_number_digits"] == 100
    edge = {"queries": ["alpha"], "extra": json.loads("[" * 31 + "]" * 31), "big": int("9" * 100)}
    assert client.post("/retrieve", json=edge).status_code == 200
    resp = client.post("/retrieve", json={"queries": ["alpha"], "topk": int("9" * 100)})
    assert resp.status_code == 422 and "topk must be in [1, 5]" in resp.json()["error"]


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
    with live_server(create_app(retriever, max_batch=MAX_BATCH, max_k=MAX_K)) as (url, _):
        yield url


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


# ---- faults of the server's own files -----------------------------------------------------

WORDS = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india", "juliett",
         "kilo", "lima", "mike", "november", "oscar", "papa", "quebec", "romeo", "sierra", "tango",
         "uniform", "victor", "whiskey", "xray", "yankee"]


@pytest.fixture()
def damaged_prebuilt(tmp_path):
    """A prebuilt-style index whose corpus line 21 ("uniform") is braced but not JSON: it opens
    (only a few lines are parsed at start) and fails when a search returns that passage."""
    lines, contents = [], []
    for i, word in enumerate(WORDS):
        contents.append(join_contents(word.title(), f"{word} facts and {word} stories"))
        lines.append(json.dumps({"id": str(i), "contents": contents[-1]}))
    lines[20] = '{"id": "20" "contents": "missing comma"}'
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text("\n".join(lines) + "\n")
    index = faiss.IndexFlatIP(HashEncoder.dim)
    index.add(HashEncoder().encode_passages(contents))
    faiss.write_index(index, str(tmp_path / "e5_Flat.index"))
    return DenseRetriever.from_prebuilt(tmp_path / "e5_Flat.index", corpus, HashEncoder()), corpus


@pytest.mark.parametrize("batching", [True, False])
def test_a_damaged_corpus_line_is_a_500_without_paths_and_logged_with_its_line(damaged_prebuilt, batching, caplog):
    retriever, corpus = damaged_prebuilt
    client = TestClient(create_app(retriever, batching=batching), raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="pipeline.retrieval.server"):
        resp = client.post("/retrieve", json={"queries": ["uniform"], "topk": 1})
    assert resp.status_code == 500, resp.text
    error = resp.json()["error"]
    assert error.startswith("server error: a passage this search returned is damaged in the server's corpus")
    assert str(corpus.parent) not in resp.text and "corpus.jsonl" not in resp.text
    assert f"{corpus}:21: invalid JSON" in caplog.text
    ok = client.post("/retrieve", json={"queries": ["victor"], "topk": 1})  # another passage: served
    assert ok.status_code == 200 and ok.json()["result"][0][0]["id"] != "20"
    assert client.get("/health").status_code == 200


def test_a_failing_search_is_a_500_that_names_no_detail(caplog):
    class Broken:
        def search(self, queries, k):
            raise RuntimeError("/srv/secret/index.faiss: read error")

    client = TestClient(create_app(Broken()), raise_server_exceptions=False)
    with caplog.at_level(logging.ERROR, logger="pipeline.retrieval.server"):
        resp = client.post("/retrieve", json={"queries": ["a"]})
    assert resp.status_code == 500 and "/srv/secret" not in resp.text
    assert resp.json()["error"] == "server error: the search failed (RuntimeError); the server's log has the details"
    assert "/srv/secret/index.faiss: read error" in caplog.text
