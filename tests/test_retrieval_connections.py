"""The server's HTTP connections: request headers that do not arrive within the header timeout
get a 408 and the connection is closed (trickled or stalled, first request or kept alive); a
search slower than the timeout is not cut; a connection over the cap gets a 503."""

from __future__ import annotations

import socket
import time

import httpx
import pytest

from pipeline.errors import InputError
from pipeline.retrieval.base import Passage
from pipeline.retrieval.connections import protocol_for
from pipeline.retrieval.limits import ConnectionLimits
from pipeline.retrieval.server import create_app

from .helpers.live_server import live_server

TIMEOUT_S = 0.5
REQUEST = (b"POST /retrieve HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
           b"Content-Length: 18\r\n\r\n{\"queries\": [\"a\"]}")


class SlowRetriever:
    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def search(self, queries, k):
        time.sleep(self.delay)
        return [[Passage(f"{q}-0", "T", q, 1.0)] for q in queries]


@pytest.fixture()
def server():
    app = create_app(SlowRetriever(delay=2 * TIMEOUT_S),
                     connections=ConnectionLimits(header_timeout_s=TIMEOUT_S, max_connections=2))
    with live_server(app) as (url, port):
        yield url, port


def read_until_closed(sock: socket.socket) -> bytes:
    reply = b""
    while chunk := sock.recv(65536):
        reply += chunk
    return reply


def read_response(sock: socket.socket) -> bytes:
    """One whole response on a kept-alive connection: its headers, then Content-Length bytes."""
    data = b""
    while b"\r\n\r\n" not in data:
        data += sock.recv(65536)
    head, _, body = data.partition(b"\r\n\r\n")
    length = int(next(line.split(b":")[1] for line in head.split(b"\r\n")
                      if line.lower().startswith(b"content-length")))
    while len(body) < length:
        body += sock.recv(65536)
    return head + b"\r\n\r\n" + body


def test_a_slow_header_client_gets_408_and_is_closed(server):
    url, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(b"POST /retrieve HTTP/1.1\r\nHost: x\r\n")  # and never the blank line
        started = time.perf_counter()
        reply = read_until_closed(sock)
        waited = time.perf_counter() - started
    assert reply.startswith(b"HTTP/1.1 408 Request Timeout\r\n"), reply[:200]
    assert b"request headers not complete after 0.5 s" in reply
    assert TIMEOUT_S * 0.8 < waited < TIMEOUT_S + 3
    assert httpx.get(f"{url}/health", timeout=5).json()["header_timeout_s"] == TIMEOUT_S


def test_headers_trickled_byte_by_byte_meet_the_same_deadline(server):
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        started = time.perf_counter()
        with pytest.raises(OSError):  # the server closes the connection while bytes still trickle in
            for byte in REQUEST * 10:
                sock.sendall(bytes([byte]))
                time.sleep(0.05)
        waited = time.perf_counter() - started
    assert waited < TIMEOUT_S + 3


def test_a_silent_connection_is_closed_without_an_answer(server):
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        assert read_until_closed(sock) == b""


def test_a_kept_alive_connection_gets_the_deadline_again_and_slow_searches_are_not_cut(server):
    _, port = server
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        for _ in range(2):  # each search takes 2x the header timeout: answered all the same
            sock.sendall(REQUEST)
            reply = read_response(sock)
            assert reply.startswith(b"HTTP/1.1 200") and reply.endswith(b"]]}"), reply[:200]
        sock.sendall(b"POST /retrieve HTTP/1.1\r\n")
        assert read_until_closed(sock).startswith(b"HTTP/1.1 408")


def test_a_connection_over_the_cap_gets_503_until_one_closes(server):
    url, port = server
    held = [socket.create_connection(("127.0.0.1", port), timeout=10) for _ in range(2)]
    try:
        time.sleep(0.1)
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(REQUEST)
            reply = read_until_closed(sock)
        assert reply.startswith(b"HTTP/1.1 503"), reply[:200]
        assert b"busy: 2 connections already open (max_connections); retry later" in reply
    finally:
        for sock in held:
            sock.close()
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            if httpx.get(f"{url}/health", timeout=5).status_code == 200:
                break
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    else:
        pytest.fail("the server did not serve again after the held connections closed")


@pytest.mark.parametrize("limits", [ConnectionLimits(header_timeout_s=0), ConnectionLimits(max_connections=0)])
def test_limits_that_would_serve_nothing_are_refused(limits):
    with pytest.raises(InputError, match="--header-timeout.*--max-connections"):
        protocol_for(limits)
