"""Retriever over HTTP: talks to a Search-R1 style /retrieve server (ours or theirs)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import httpx

from pipeline.errors import InputError
from pipeline.retrieval.base import Passage
from pipeline.retrieval.contents import split_contents


class RetrievalError(RuntimeError):
    """The retrieval server failed or answered something that is not Search-R1 shaped."""


def parse_hit(hit: Any) -> Passage:
    """{"document": {...}, "score": s} or a bare document -> Passage."""
    doc, score = (hit.get("document"), hit.get("score", 0.0)) if isinstance(hit, dict) and \
        "document" in hit else (hit, 0.0)
    if not isinstance(doc, dict) or not isinstance(doc.get("contents"), str):
        raise RetrievalError(f"retrieval response: expected a document with 'contents', got {hit!r:.200}")
    title, text = split_contents(doc["contents"])
    return Passage(id=str(doc.get("id", "")), title=title, text=text, score=float(score or 0.0),
                   stored_contents=doc["contents"])


class HttpRetriever:
    """Retriever protocol over HTTP: one POST per search() batch."""

    def __init__(self, url: str, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None) -> None:
        self.url = url if url.rstrip("/").endswith("/retrieve") else url.rstrip("/") + "/retrieve"
        self._client = httpx.Client(timeout=timeout, transport=transport)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        if isinstance(queries, str):
            raise InputError("queries: expected a sequence of strings, got a single string")
        queries = list(queries)
        if not queries:
            return []
        try:
            response = self._client.post(self.url, json={"queries": queries, "topk": k,
                                                         "return_scores": True})
        except httpx.HTTPError as err:
            raise RetrievalError(f"{self.url}: request failed ({err})") from err
        if response.status_code >= 400:
            raise RetrievalError(f"{self.url}: HTTP {response.status_code}: {response.text[:500]}")
        try:
            result = response.json()["result"]
        except (ValueError, KeyError, TypeError) as err:
            raise RetrievalError(f"{self.url}: response is not {{'result': [...]}}") from err
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(f"{self.url}: expected {len(queries)} result lists")
        return [[parse_hit(h) for h in hits] for hits in result]

    def close(self) -> None:
        self._client.close()

    def __enter__(self) -> HttpRetriever:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
