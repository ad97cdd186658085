"""Fuzz of a real server with malformed /retrieve requests: every row of the refusal table
(docs/retriever.md) and the adversarial probe's kinds (integers of thousands of digits and JSON
nested thousands deep, placed anywhere in the body) each get their documented 4xx, and the
server answers /health after every one of them.

Requests are raw bytes on a fresh socket ("Connection: close"), so that bodies that are not
JSON, not UTF-8, stalled or cut short reach the server exactly as drawn. The fixed catalogue
benchmarks/bench_retrieval_reliability.py sends is checked here too."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.malformed_requests import cases, request, send
from pipeline.retrieval.base import Passage
from pipeline.retrieval.limits import ConnectionLimits, ServerLimits
from pipeline.retrieval.server import create_app

from .helpers.live_server import live_server

LIMITS = ServerLimits(max_batch=4, max_k=5, max_query_chars=64, max_body_bytes=1 << 20, body_timeout_s=0.5)
CONNECTIONS = ConnectionLimits(header_timeout_s=0.5, max_connections=64)
SENTINEL = "\x00POISON\x00"  # stands for the drawn fragment in a body, replaced after json.dumps
QUOTED_SENTINEL = json.dumps(SENTINEL)


class Echo:
    def search(self, queries, k):
        return [[Passage(f"{q[:8]}-{j}", "T", q, 1.0) for j in range(k)] for q in queries]


@pytest.fixture(scope="module")
def server():
    with live_server(create_app(Echo(), LIMITS, connections=CONNECTIONS)) as (url, port):
        yield url, port


# ---- fragments placed anywhere in a body -----------------------------------------------------

@st.composite
def huge_number(draw) -> str:
    digits = "1" + "0" * (draw(st.integers(4300, 6000)) - 1)
    return draw(st.sampled_from([digits, "-" + digits, digits + ".5", "0." + digits, digits + "e5"]))


@st.composite
def deep_nesting(draw) -> str:
    depth = draw(st.sampled_from([LIMITS.max_json_depth + 1, 1000, 100_000]))
    shape = draw(st.sampled_from(["arrays", "objects", "mixed"]))
    if shape == "arrays":
        return "[" * depth + "]" * depth
    if shape == "objects":
        return '{"k": ' * depth + "1" + "}" * depth
    return '{"k": [' * ((depth + 1) // 2) + "]}" * ((depth + 1) // 2)


PLACES = {  # where the fragment goes: each a body holding SENTINEL
    "whole body": SENTINEL,
    "queries": {"queries": SENTINEL},
    "a query": {"queries": ["alpha", SENTINEL]},
    "topk": {"queries": ["alpha"], "topk": SENTINEL},
    "return_scores": {"queries": ["alpha"], "return_scores": SENTINEL},
    "an extra field": {"queries": ["alpha"], "extra": SENTINEL},
    "deep in an extra field": {"queries": ["alpha"], "meta": {"a": [1, {"b": SENTINEL}]}},
    "before queries": {"extra": [SENTINEL], "queries": ["alpha"]},
}


@st.composite
def placed(draw, fragment) -> bytes:
    body = json.dumps(PLACES[draw(st.sampled_from(sorted(PLACES)))])
    return request(body.replace(QUOTED_SENTINEL, draw(fragment)).encode())


# ---- the refusal table, row by row -----------------------------------------------------------

def body_of(value) -> bytes:
    return request(json.dumps(value).encode())


query = st.text(alphabet="abcdefgh ", min_size=1, max_size=10)
queries = st.lists(query, min_size=1, max_size=3)


@st.composite
def cut_short(draw) -> bytes:
    body = json.dumps({"queries": draw(queries), "topk": 2}).encode()
    return request(body[:draw(st.integers(0, len(body) - 1))])


@st.composite
def text_with(draw, inserted: str) -> bytes:
    text = draw(query)
    at = draw(st.integers(0, len(text)))
    raw = json.dumps({"queries": [text[:at] + SENTINEL + text[at:]]}).replace(QUOTED_SENTINEL[1:-1], inserted)
    return request(raw.encode())


@st.composite
def invalid_utf8(draw) -> bytes:
    body = json.dumps({"queries": [draw(query)]}).encode()
    bad = draw(st.sampled_from([b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xe2\x82"]))
    at = body.index(b'["') + 2
    return request(body[:at] + bad + body[at:])


KINDS = {  # name: (strategy of raw requests, the documented status)
    "huge number anywhere": (placed(huge_number()), 422),
    "deep nesting anywhere": (placed(deep_nesting()), 422),
    "topk of the wrong type": (st.builds(lambda q, k: body_of({"queries": q, "topk": k}), queries,
                                         st.sampled_from(["3", 2.5, True, [3], {"k": 3}])), 422),
    "queries of the wrong type": (st.builds(lambda q: body_of({"queries": q}),
                                            st.sampled_from(["alpha", 3, None, [1], ["a", 2], {"q": "a"}])), 422),
    "return_scores of the wrong type": (st.builds(lambda q, r: body_of({"queries": q, "return_scores": r}),
                                                  queries, st.sampled_from(["yes", 1, [True]])), 422),
    "missing queries": (st.builds(lambda k: body_of({"topk": k}), st.integers(1, 5)), 422),
    "empty queries": (st.just(body_of({"queries": []})), 422),
    "not an object": (st.builds(body_of, st.sampled_from([["alpha"], "alpha", 3, None, True])), 422),
    "malformed JSON": (cut_short(), 422),
    "topk out of range": (st.builds(lambda q, k: body_of({"queries": q, "topk": k}), queries,
                                    st.sampled_from([0, -1, LIMITS.max_k + 1, 10 ** 50])), 422),
    "query too long": (st.builds(lambda n: body_of({"queries": ["a" * n]}),
                                 st.integers(LIMITS.max_query_chars + 1, 4 * LIMITS.max_query_chars)), 422),
    "too many queries": (st.builds(lambda n: body_of({"queries": ["a"] * n}),
                                   st.integers(LIMITS.max_batch + 1, 3 * LIMITS.max_batch)), 413),
    "NUL in a query": (text_with("\\u0000"), 400),
    "lone surrogate": (text_with("\\ud800"), 400),
    "not UTF-8": (invalid_utf8(), 400),
    "body over max_body_bytes (declared)": (st.just(request(b'{"queries": ["a"]', length=str(2 << 20))), 413),
    "body over max_body_bytes (chunked)": (st.just(
        b"POST /retrieve HTTP/1.1\r\nHost: fuzz\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
        + (b"100000\r\n" + b"x" * 0x100000 + b"\r\n") * 2 + b"0\r\n\r\n"), 413),
    "body that stops arriving": (st.builds(lambda n: request(b'{"queries": ["a"]}'[:n], length="100"),
                                           st.integers(0, 17)), 408),
    "headers that stop arriving": (st.builds(lambda n: b"POST /retrieve HTTP/1.1\r\nHost: fuzz\r\n"[:n],
                                             st.integers(1, 36)), 408),
    "Content-Length not a number": (st.just(request(b"{}", length="12a")), 400),
    "wrong method": (st.builds(lambda m: request(b"", method=m), st.sampled_from(["GET", "PUT", "DELETE"])), 405),
    "unknown path": (st.builds(lambda p: request(b"{}", path=p), st.sampled_from(["/", "/search", "/retrieve/x"])),
                     404),
}


@pytest.mark.parametrize("kind", sorted(KINDS))
@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.data_too_large])
@given(data=st.data())
def test_every_malformed_request_gets_its_4xx_and_the_server_stays_up(server, kind, data):
    url, port = server
    strategy, expected = KINDS[kind]
    status, reply = send(port, data.draw(strategy, label="request"), timeout=10)
    assert status == expected, f"{kind}: HTTP {status}, expected {expected}: {reply[:300]!r}"
    assert 400 <= status < 500
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200, "the server did not answer /health"


@pytest.mark.parametrize("case", cases(LIMITS), ids=lambda case: case.kind)
def test_the_reliability_benchmarks_requests_get_their_status(server, case):
    url, port = server
    status, reply = send(port, case.raw, timeout=10)
    assert status == case.expected, f"{case.kind}: HTTP {status}, expected {case.expected}: {reply[:300]!r}"
    assert httpx.get(f"{url}/health", timeout=5).status_code == 200
