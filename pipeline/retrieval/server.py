"""Search-R1 compatible retrieval HTTP API (POST /retrieve, GET /health).

Concurrent requests share encoder batches (pipeline.retrieval.batcher); /health answers on the
event loop and never waits on the encoder. Every request that is refused gets a 4xx JSON body
{"error": "..."} naming the field: 400 for text the encoder must not see (NUL, lone
surrogates, bytes that are not UTF-8), 408 for headers or a body that stop arriving
(pipeline.retrieval.connections), 413 for a body or batch over its limit, 422 for a body of
the wrong shape (JSON nested too deep or a number too long included), 503 when the queue or
the connections are full. A fault of the server's own files (a damaged corpus line) or of the
search is a 500, logged with its file and line; the answer names neither.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import logging
import sys
import threading
from dataclasses import asdict
from typing import Any

from fastapi import FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from pipeline.errors import DataFault
from pipeline.retrieval.base import Passage, Retriever
from pipeline.retrieval.batcher import MicroBatcher, QueueFull, describe
from pipeline.retrieval.connections import server_config
from pipeline.retrieval.limits import ENCODE_BATCH_QUERIES, MAX_WAITING_REQUESTS, ConnectionLimits, ServerLimits
from pipeline.retrieval.request_json import JsonBoundExceeded, loads_bounded

log = logging.getLogger(__name__)


class RetrieveRequest(BaseModel):
    """Search-R1 request body; strict types, so "3" is not accepted for topk; other fields are
    ignored (as Search-R1's server does)."""

    model_config = ConfigDict(strict=True, extra="ignore")
    queries: list[StrictStr]
    topk: StrictInt | None = None
    return_scores: StrictBool = False


class Refused(Exception):
    def __init__(self, status: int, message: str, detail: Any = None) -> None:
        super().__init__(message)
        self.status, self.message, self.detail = status, message, detail


def document(passage: Passage) -> dict[str, str]:
    return {"id": passage.id, "contents": passage.contents}


def format_results(results: list[list[Passage]], return_scores: bool) -> dict[str, Any]:
    """Search-R1 shape: with scores [{"document", "score"}], without scores bare documents."""
    if return_scores:
        return {"result": [[{"document": document(p), "score": float(p.score)} for p in hits]
                           for hits in results]}
    return {"result": [[document(p) for p in hits] for hits in results]}


def results_response(results: list[list[Passage]], return_scores: bool) -> JSONResponse:
    """The rendered answer. Built off the event loop (see `retrieve`): a finished encoder batch
    answers dozens of requests at once, and rendering them on the loop kept /health waiting."""
    return JSONResponse(format_results(results, return_scores))


def _error(status: int, message: str, detail: Any = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    headers = {"Connection": "close"} if status in (408, 413) else None
    return JSONResponse(status_code=status, content=body, headers=headers)


def _describe(errors: list[dict]) -> str:
    parts = []
    for err in errors:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


async def read_body(request: Request, limits: ServerLimits) -> bytes:
    """The request body, refused past max_body_bytes (413) or when it is not complete within
    body_timeout_s (408: a body shorter than its Content-Length must not hold a connection)."""
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise Refused(400, f"invalid request: Content-Length header {declared[:40]!r} is not a number")
        if int(declared) > limits.max_body_bytes:
            raise Refused(413, f"invalid request: body of {int(declared)} bytes exceeds max_body_bytes="
                               f"{limits.max_body_bytes}")

    async def receive() -> bytes:
        chunks, size = [], 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > limits.max_body_bytes:
                raise Refused(413, f"invalid request: body exceeds max_body_bytes={limits.max_body_bytes}")
            chunks.append(chunk)
        return b"".join(chunks)

    try:
        return await asyncio.wait_for(receive(), timeout=limits.body_timeout_s)
    except TimeoutError:
        raise Refused(408, f"invalid request: body not complete after {limits.body_timeout_s:g} s "
                           f"(Content-Length {declared})") from None


async def _disconnected(request: Request) -> None:
    """Returns when the client closes its connection (the body has been read already)."""
    while (await request.receive())["type"] != "http.disconnect":
        pass


def _check_text(queries: list[str]) -> None:
    for i, query in enumerate(queries):
        if "\x00" in query:
            raise Refused(400, f"invalid request: queries[{i}] contains a NUL character (\\u0000)")
        try:
            query.encode("utf-8")
        except UnicodeEncodeError as err:
            raise Refused(400, f"invalid request: queries[{i}] contains a lone surrogate "
                               f"(U+{ord(query[err.start]):04X} at character {err.start})") from None


def parse_request(body: bytes, limits: ServerLimits) -> tuple[list[str], int, bool]:
    """Body -> (queries, topk, return_scores), or Refused naming the field."""
    try:
        payload = loads_bounded(body, limits.max_json_depth, limits.max_number_digits)
    except JsonBoundExceeded as err:
        raise Refused(422, f"invalid request: {err}") from None
    except UnicodeDecodeError as err:
        raise Refused(400, f"invalid request: body is not UTF-8 (byte {err.start})") from None
    except json.JSONDecodeError as err:
        raise Refused(422, f"invalid request: body is not JSON ({err.msg} at line {err.lineno}, "
                           f"column {err.colno})") from None
    try:
        request = RetrieveRequest.model_validate(payload)
    except ValidationError as err:
        errors = [{k: v for k, v in e.items() if k in ("type", "loc", "msg")} for e in err.errors()]
        raise Refused(422, f"invalid request: {_describe(errors)}", errors) from None
    topk = limits.default_k if request.topk is None else request.topk
    if not 1 <= topk <= limits.max_k:
        raise Refused(422, f"invalid request: topk must be in [1, {limits.max_k}], got {topk}")
    if not request.queries:
        raise Refused(422, "invalid request: queries must be a non-empty list of strings")
    if len(request.queries) > limits.max_batch:
        raise Refused(413, f"invalid request: {len(request.queries)} queries exceed max_batch={limits.max_batch}")
    too_long = [i for i, q in enumerate(request.queries) if len(q) > limits.max_query_chars]
    if too_long:
        raise Refused(422, f"invalid request: queries[{too_long[0]}] is longer than "
                           f"{limits.max_query_chars} characters")
    _check_text(request.queries)
    return request.queries, topk, request.return_scores


def search_failed(err: BaseException) -> JSONResponse:
    """500 for a search that raised: the server's fault, never the client's. The log names the
    file and line (a DataFault's message does); the answer names no path of the server."""
    if isinstance(err, DataFault):
        log.error("search failed on a damaged file of the server: %s", err)
        return _error(500, "server error: a passage this search returned is damaged in the server's corpus; "
                           "the server's log names the file and line")
    log.error("search failed: %s: %s", type(err).__name__, err, exc_info=err)
    return _error(500, f"server error: the search failed ({type(err).__name__}); the server's log has the details")


def create_app(retriever: Retriever, limits: ServerLimits | None = None, batching: bool = True,
               batch_queries: int = ENCODE_BATCH_QUERIES, max_waiting: int = MAX_WAITING_REQUESTS,
               connections: ConnectionLimits | None = None, **limit_overrides: Any) -> FastAPI:
    """FastAPI app serving `retriever`. batching=False is the old single-lock server (every
    request searched alone, one at a time, /health in the same thread pool): kept as the
    baseline of benchmarks/bench_retrieval_load.py. `connections` is what run_app (or
    connections.server_config) gives the HTTP layer."""
    limits = limits or ServerLimits(**limit_overrides)
    app = FastAPI(title="MultiAgent-OPD retrieval", version="2")
    app.state.connections = connections = connections or ConnectionLimits()
    batcher = MicroBatcher(retriever, batch_queries=batch_queries, max_jobs=max_waiting) if batching else None
    app.state.batcher = batcher
    lock = threading.Lock()
    if batcher is not None:
        app.router.on_shutdown.append(batcher.close)

    @app.exception_handler(Refused)
    async def _refused(_: Request, exc: Refused) -> JSONResponse:
        return _error(exc.status, exc.message, exc.detail)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _error(exc.status_code, f"{exc.detail}: expected POST /retrieve or GET /health")

    def health_body() -> dict[str, Any]:
        index = getattr(retriever, "index", None)
        encoder = getattr(retriever, "encoder", None)
        return {"status": "ok", "count": int(getattr(index, "ntotal", -1)),
                "encoder": getattr(encoder, "name", None), **asdict(limits), **asdict(connections),
                **describe(batcher)}

    if batcher is not None:
        @app.get("/health")
        async def health() -> dict[str, Any]:
            return health_body()
    else:
        @app.get("/health")
        def health_in_pool() -> dict[str, Any]:
            return health_body()

    def locked_search(queries: list[str], topk: int) -> list[list[Passage]]:
        with lock:
            return retriever.search(queries, topk)

    @app.post("/retrieve")
    async def retrieve(request: Request) -> Any:
        try:
            body = await read_body(request, limits)
        except ClientDisconnect:
            return _error(400, "invalid request: client disconnected before the body was complete")
        queries, topk, return_scores = parse_request(body, limits)
        try:
            if batcher is None:
                results = await run_in_threadpool(locked_search, queries, topk)
            else:
                search = asyncio.ensure_future(batcher.search(queries, topk))
                gone = asyncio.ensure_future(_disconnected(request))
                await asyncio.wait({search, gone}, return_when=asyncio.FIRST_COMPLETED)
                gone.cancel()
                if not search.done():  # the client left (e.g. its timeout): its job is dropped unsearched
                    search.cancel()
                    return _error(499, "client disconnected")
                results = search.result()
            return await run_in_threadpool(results_response, results, return_scores)
        except QueueFull as err:
            return JSONResponse(status_code=503, content={"error": f"busy: {err}; retry later"},
                                headers={"Retry-After": "1"})
        except Exception as err:  # the request was valid: whatever the search raised is the server's
            return search_failed(err)

    return app


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def warn_if_exposed(host: str) -> None:
    if not is_loopback(host):
        print(f"warning: serving on {host}, not loopback: the retrieval server has no authentication; "
              f"anyone who can reach this address can query it", file=sys.stderr, flush=True)


GIL_SWITCH_INTERVAL_S = 0.001


def run_app(app: FastAPI, host: str = "127.0.0.1", port: int = 8000, log_level: str = "info") -> None:
    """Serve `app` with uvicorn (blocks until stopped), with the header deadline and the
    connection cap of create_app's `connections`; warns when not bound to loopback."""
    import uvicorn

    config = server_config(app, host=host, port=port, log_level=log_level)
    warn_if_exposed(host)
    # The encoder worker and the answer-rendering threads hold the GIL in Python's 5 ms slices;
    # every step of a /health answer (accept, read, reply) waits for one. 1 ms slices keep
    # /health quick while a batch is tokenised and answered.
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    uvicorn.Server(config).run()
