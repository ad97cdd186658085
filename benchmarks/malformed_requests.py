"""Malformed /retrieve requests as raw HTTP/1.1 bytes, one per kind of refusal in
docs/retriever.md plus the adversarial probe's (integers of 5,000 digits and JSON nested
100,000 deep, in each place of a body), each with the status it must get; and a raw sender:
a fresh connection per request, read until the server closes it ("Connection: close"), so
that bodies that are not JSON, not UTF-8, stalled or cut short reach the server as written."""

from __future__ import annotations

import json
import socket
from dataclasses import dataclass

from pipeline.retrieval.limits import ServerLimits

HUGE = "1" + "0" * 4999  # 5,000 digits: past Python's 4,300-digit limit on int()
DEEP = 100_000


@dataclass(frozen=True)
class Case:
    kind: str
    raw: bytes
    expected: int  # the documented status


def request(body: bytes, method: str = "POST", path: str = "/retrieve", length: str | None = None) -> bytes:
    length = str(len(body)) if length is None else length
    return (f"{method} {path} HTTP/1.1\r\nHost: probe\r\nConnection: close\r\nContent-Type: application/json\r\n"
            f"Content-Length: {length}\r\n\r\n").encode() + body


def send(port: int, raw: bytes, host: str = "127.0.0.1", timeout: float = 60.0) -> tuple[int | None, bytes]:
    """Send `raw`, read until the server closes the connection: (status or None, the answer)."""
    reply = b""
    with socket.create_connection((host, port), timeout=timeout) as sock:
        try:
            sock.sendall(raw)
        except OSError:  # refused early (413 on Content-Length) and closed while the body was still going
            pass
        try:
            while chunk := sock.recv(65536):
                reply += chunk
        except ConnectionResetError:
            pass
    if not reply.startswith(b"HTTP/1.1 "):
        return None, reply
    return int(reply.split(b" ", 2)[1]), reply


def _json(value) -> bytes:
    return request(json.dumps(value).encode())


def _with(template: dict | str, fragment: str) -> bytes:
    """`template` with the JSON text `fragment` where "@" stands."""
    return request(json.dumps(template).replace('"@"', fragment).encode())


def probe_cases() -> list[Case]:
    """The probe's five kinds that were 500s, and the same fragments in every other place."""
    places = {"topk": {"queries": ["a"], "topk": "@"}, "an extra field": {"queries": ["a"], "extra": "@"},
              "queries": {"queries": "@"}, "a query": {"queries": ["a", "@"]},
              "deep in an extra field": {"queries": ["a"], "meta": {"x": [1, {"y": "@"}]}}, "the body": "@"}
    fragments = {"integer of 5,000 digits": HUGE, "negative integer of 5,000 digits": "-" + HUGE,
                 "float of 5,000 digits": HUGE + ".5", "arrays nested 100,000 deep": "[" * DEEP + "]" * DEEP,
                 "objects nested 100,000 deep": '{"k": ' * DEEP + "1" + "}" * DEEP}
    return [Case(f"{name} as {place}", _with(template, text), 422)
            for name, text in fragments.items() for place, template in places.items()]


def table_cases(limits: ServerLimits | None = None) -> list[Case]:
    """One request per row of the refusal table (the limits of `limits`, default the server's)."""
    limits = limits or ServerLimits()
    big = limits.max_body_bytes + 1
    chunked = (b"POST /retrieve HTTP/1.1\r\nHost: probe\r\nConnection: close\r\nTransfer-Encoding: chunked\r\n\r\n"
               + f"{big:x}\r\n".encode() + b"x" * big + b"\r\n0\r\n\r\n")
    return [
        Case("too many queries", _json({"queries": ["q"] * (limits.max_batch + 1)}), 413),
        Case("topk over max_k", _json({"queries": ["a"], "topk": limits.max_k + 1}), 422),
        Case("topk 0", _json({"queries": ["a"], "topk": 0}), 422),
        Case("query over max_query_chars", _json({"queries": ["a" * (limits.max_query_chars + 1)]}), 422),
        Case("body over max_body_bytes, declared", request(b'{"queries": ["a"]}', length=str(big)), 413),
        Case("body over max_body_bytes, chunked", chunked, 413),
        Case("body shorter than its Content-Length", request(b'{"queries": ["a', length="100"), 408),
        Case("headers that stop", b"POST /retrieve HTTP/1.1\r\nHost: probe\r\n", 408),
        Case("JSON one level deeper than max_json_depth",
             _with({"queries": ["a"], "x": "@"}, "[" * limits.max_json_depth + "]" * limits.max_json_depth), 422),
        Case("NUL in a query", request(b'{"queries": ["a\\u0000b"]}'), 400),
        Case("lone surrogate", request(b'{"queries": ["a\\ud800b"]}'), 400),
        Case("bytes that are not UTF-8", request(b'{"queries": ["\xff\xfe"]}'), 400),
        Case("body in UTF-16", request('{"queries": ["a"]}'.encode("utf-16")), 400),
        Case("topk a string", _json({"queries": ["a"], "topk": "3"}), 422),
        Case("topk a float", _json({"queries": ["a"], "topk": 2.5}), 422),
        Case("queries a string", _json({"queries": "a"}), 422),
        Case("queries holding a number", _json({"queries": ["a", 3]}), 422),
        Case("return_scores a string", _json({"queries": ["a"], "return_scores": "yes"}), 422),
        Case("missing queries", _json({"topk": 3}), 422),
        Case("empty queries", _json({"queries": []}), 422),
        Case("body not an object", _json(["a"]), 422),
        Case("malformed JSON", request(b'{"queries": ["a"]'), 422),
        Case("empty body", request(b""), 422),
        Case("Content-Length not a number", request(b"{}", length="12a"), 400),
        Case("GET /retrieve", request(b"", method="GET"), 405),
        Case("unknown path", request(b"{}", path="/search"), 404),
    ]


def cases(limits: ServerLimits | None = None) -> list[Case]:
    return table_cases(limits) + probe_cases()
