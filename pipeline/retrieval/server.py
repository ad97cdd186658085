"""Search-R1 compatible retrieval HTTP API (POST /retrieve, GET /health)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, StrictBool, StrictInt, StrictStr

from pipeline.errors import InputError
from pipeline.retrieval.base import Passage, Retriever
from pipeline.retrieval.encoders import Encoder


class RetrieveRequest(BaseModel):
    """Search-R1 request body; strict types, so "3" is not accepted for topk."""

    model_config = ConfigDict(strict=True, extra="ignore")
    queries: list[StrictStr]
    topk: Optional[StrictInt] = None
    return_scores: StrictBool = False


def document(passage: Passage) -> dict[str, str]:
    return {"id": passage.id, "contents": passage.contents}


def format_results(results: list[list[Passage]], return_scores: bool) -> dict[str, Any]:
    """Search-R1 shape: with scores [{"document", "score"}], without scores bare documents."""
    if return_scores:
        return {"result": [[{"document": document(p), "score": float(p.score)} for p in hits]
                           for hits in results]}
    return {"result": [[document(p) for p in hits] for hits in results]}


def _error(status: int, message: str, detail: Any = None) -> JSONResponse:
    body: dict[str, Any] = {"error": message}
    if detail is not None:
        body["detail"] = detail
    return JSONResponse(status_code=status, content=body)


def _describe(errors: list[dict]) -> str:
    parts = []
    for err in errors:
        loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body") or "body"
        parts.append(f"{loc}: {err.get('msg', 'invalid')}")
    return "; ".join(parts)


def create_app(retriever: Retriever, max_batch: int = 512, max_k: int = 50, default_k: int = 3,
               max_query_chars: int = 4096) -> FastAPI:
    """FastAPI app serving `retriever`; bad requests get a 4xx with {"error": message}."""
    app = FastAPI(title="MultiAgent-OPD retrieval", version="1")

    @app.exception_handler(RequestValidationError)
    async def _invalid(_: Request, exc: RequestValidationError) -> JSONResponse:
        errors = [{k: v for k, v in e.items() if k in ("type", "loc", "msg")} for e in exc.errors()]
        return _error(422, f"invalid request: {_describe(errors)}", errors)

    @app.exception_handler(InputError)
    async def _bad_input(_: Request, exc: InputError) -> JSONResponse:
        return _error(422, f"invalid request: {exc}")

    @app.get("/health")
    def health() -> dict[str, Any]:
        index = getattr(retriever, "index", None)
        encoder = getattr(retriever, "encoder", None)
        return {"status": "ok", "count": int(getattr(index, "ntotal", -1)),
                "encoder": getattr(encoder, "name", None), "max_batch": max_batch, "max_k": max_k}

    @app.post("/retrieve")
    def retrieve(body: RetrieveRequest) -> Any:
        topk = default_k if body.topk is None else body.topk
        if not 1 <= topk <= max_k:
            return _error(422, f"invalid request: topk must be in [1, {max_k}], got {topk}")
        if not body.queries:
            return _error(422, "invalid request: queries must be a non-empty list of strings")
        if len(body.queries) > max_batch:
            return _error(413, f"invalid request: {len(body.queries)} queries exceed max_batch={max_batch}")
        too_long = [i for i, q in enumerate(body.queries) if len(q) > max_query_chars]
        if too_long:
            return _error(422, f"invalid request: queries[{too_long[0]}] is longer than "
                               f"{max_query_chars} characters")
        return format_results(retriever.search(body.queries, topk), body.return_scores)

    return app


def serve(index_dir: str | Path, host: str = "127.0.0.1", port: int = 8000,
          encoder: Encoder | None = None, max_batch: int = 512, max_k: int = 50,
          log_level: str = "info") -> None:
    """Load the index folder and serve it with uvicorn (blocks until stopped)."""
    import uvicorn

    from pipeline.retrieval.retriever import DenseRetriever

    app = create_app(DenseRetriever.from_dir(index_dir, encoder), max_batch=max_batch, max_k=max_k)
    uvicorn.run(app, host=host, port=port, log_level=log_level)
