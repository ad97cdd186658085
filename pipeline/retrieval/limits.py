"""What one request to the retrieval server may ask for, and how many connections it holds
open for how long (the server's and the CLI's defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for. max_batch covers Search-R1's trainer (512 prompts x 5
    rollouts = 2,560 queries); the body limit covers max_batch queries of ~4,000 bytes. A
    Search-R1 body nests 2 deep and its one number is topk: the JSON bounds leave room for
    extra fields, and keep the parser far from Python's recursion and integer-size limits."""

    max_batch: int = 4096
    max_k: int = 50
    default_k: int = 3
    max_query_chars: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    body_timeout_s: float = 10.0  # a body not complete by then is refused (408), its connection closed
    max_json_depth: int = 32  # [ and { levels (422 beyond)
    max_number_digits: int = 100  # digits of one JSON number (422 beyond)


@dataclass(frozen=True)
class ConnectionLimits:
    """What the HTTP layer holds for clients: request headers not complete within
    header_timeout_s are answered 408 and closed; a connection opened while max_connections
    are open gets 503 and is closed."""

    header_timeout_s: float = 10.0
    max_connections: int = 512


ENCODE_BATCH_QUERIES = 512  # queries per encoder call of the micro-batching server
MAX_WAITING_REQUESTS = 1024  # requests queued before the server answers 503
