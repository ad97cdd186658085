"""The retrieval server's HTTP connections: a deadline for request headers and a cap on how
many are open (pipeline.retrieval.limits.ConnectionLimits).

uvicorn's h11 protocol times out only idle kept-alive connections: a client that sends part of
its request headers and stops would hold its connection for good. `GuardedH11Protocol` arms a
timer when a connection opens and again after each response; if it fires while the next
request's headers are still incomplete, the client gets a 408 and the connection is closed
(closed without an answer when the client sent nothing). A connection opened while
max_connections others are open gets a 503 for its request and is closed.
"""

from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from pipeline.errors import InputError
from pipeline.retrieval.limits import ConnectionLimits

log = logging.getLogger(__name__)
KEEP_ALIVE_S = 5  # an idle kept-alive connection is closed after this


def _json_body(message: str) -> bytes:
    return json.dumps({"error": message}).encode()


def header_timeout_response(timeout_s: float) -> bytes:
    """A whole HTTP/1.1 408 answer, written past h11 (which answers only complete requests)."""
    body = _json_body(f"invalid request: request headers not complete after {timeout_s:g} s")
    head = (f"HTTP/1.1 408 Request Timeout\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\nconnection: close\r\n\r\n")
    return head.encode("ascii") + body


def too_many_connections(max_connections: int) -> Any:
    """The ASGI app that answers every request of a connection opened over the cap."""
    body = _json_body(f"busy: {max_connections} connections already open (max_connections); retry later")

    async def app(scope: dict, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 503,
                    "headers": [(b"content-type", b"application/json"), (b"connection", b"close"),
                                (b"retry-after", b"1"), (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})
    return app


class GuardedH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the header deadline and the connection cap of `limits`
    (a subclass per server sets it: `protocol_for`)."""

    limits = ConnectionLimits()

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        self._deadline: asyncio.TimerHandle | None = None
        self._header_bytes = 0
        super().connection_made(transport)
        if len(self.connections) > self.limits.max_connections:
            self.app = too_many_connections(self.limits.max_connections)
        self._arm()

    def data_received(self, data: bytes) -> None:
        if self._awaiting_headers():
            self._header_bytes += len(data)
        super().data_received(data)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing():
            self._arm()  # a kept-alive connection: the next request's headers have the same deadline

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _awaiting_headers(self) -> bool:
        return self.cycle is None or self.cycle.response_complete

    def _arm(self) -> None:
        self._disarm()
        self._header_bytes = 0
        self._deadline = self.loop.call_later(self.limits.header_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        if not self._awaiting_headers() or self.transport.is_closing():
            return
        if self._header_bytes:
            who = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info("%s: request headers not complete after %g s: answered 408, connection closed",
                     who, self.limits.header_timeout_s)
            self.transport.write(header_timeout_response(self.limits.header_timeout_s))
        self.transport.close()


def protocol_for(limits: ConnectionLimits) -> type[GuardedH11Protocol]:
    if not limits.header_timeout_s > 0 or limits.max_connections < 1:
        raise InputError(f"connection limits: expected header_timeout_s > 0 (--header-timeout) and "
                         f"max_connections >= 1 (--max-connections), got {limits.header_timeout_s:g} and "
                         f"{limits.max_connections}")
    return type("GuardedH11Protocol", (GuardedH11Protocol,), {"limits": limits})


def server_config(app: Any, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> uvicorn.Config:
    """The uvicorn configuration of `app`, with the connection limits create_app stored on it."""
    limits = getattr(app.state, "connections", None) or ConnectionLimits()
    return uvicorn.Config(app, host=host, port=port, log_level=log_level, timeout_keep_alive=KEEP_ALIVE_S,
                          http=protocol_for(limits))
