"""An app served by a real uvicorn in a thread, configured as `serve-retriever` configures it
(pipeline.retrieval.connections.server_config: header deadline, connection cap)."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import uvicorn

from pipeline.retrieval.connections import server_config


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def live_server(app) -> Iterator[tuple[str, int]]:
    """Yields (base URL, port) once the server accepts connections; stops it afterwards."""
    port = free_port()
    server = uvicorn.Server(server_config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.time() + 10
    while not server.started and time.time() < deadline:
        time.sleep(0.02)
    assert server.started, "uvicorn did not start"
    try:
        yield f"http://127.0.0.1:{port}", port
    finally:
        server.should_exit = True
        thread.join(timeout=5)
