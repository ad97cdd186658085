"""What one request to the retrieval server may ask for (the server's and the CLI's defaults)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ServerLimits:
    """What one request may ask for. max_batch covers Search-R1's trainer (512 prompts x 5
    rollouts = 2,560 queries); the body limit covers max_batch queries of ~4,000 bytes."""

    max_batch: int = 4096
    max_k: int = 50
    default_k: int = 3
    max_query_chars: int = 4096
    max_body_bytes: int = 16 * 1024 * 1024
    body_timeout_s: float = 10.0  # a body not complete by then is refused (408), its connection closed


ENCODE_BATCH_QUERIES = 512  # queries per encoder call of the micro-batching server
MAX_WAITING_REQUESTS = 1024  # requests queued before the server answers 503
