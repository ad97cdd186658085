"""A fake SGLang server for CPU tests: real HTTP (uvicorn in a thread on 127.0.0.1, a free
port), SGLang's native routes and JSON shapes, the numbers computed by an in-process HFBackend.

Routes: GET /health, GET /get_model_info, POST /generate, POST /update_weights_from_disk,
POST /flush_cache. /generate takes `input_ids` (one list or a list of lists) and
`sampling_params` (one dict or one per entry) with n, stop, max_new_tokens, temperature,
top_p, no_stop_trim and sampling_seed; return_logprob and logprob_start_len (-1: generation,
>= 0 with max_new_tokens 0: scoring of input_ids[start:]).

Seeds: one request is sampled as ONE HFBackend.generate call whose row seeds are the entries'
`sampling_seed`s (each entry then depends on its own seed only, as on a real server); an
entry with a seed beside one without is refused (HTTP 400). So a seeded request reproduces
exactly the in-process HFBackend call with the same prompts and entry seeds.
/update_weights_from_disk loads the folder into a new HFBackend and serves that from then on.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response

from pipeline.errors import InputError
from pipeline.policy.base import SamplingParams
from pipeline.policy.hf_backend import HFBackend

_SAMPLING_KEYS = {"temperature", "top_p", "max_new_tokens", "stop", "n", "no_stop_trim", "sampling_seed"}


@dataclass
class FakeSGLangState:
    backend: HFBackend
    model_path: str = "fake-model"
    not_ready: int = 0  # the first `not_ready` requests (any route) get HTTP 503
    requests: list[tuple[str, Any]] = field(default_factory=list)  # (route, JSON body or None)
    lock: threading.Lock = field(default_factory=threading.Lock)


class _BadRequest(ValueError):
    pass


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(status_code=status, content={"error": {"message": message}})


def _per_entry(value: Any, count: int, name: str) -> list:
    if isinstance(value, list):
        if len(value) != count:
            raise _BadRequest(f"{name}: expected {count} entries, got {len(value)}")
        return value
    return [value] * count


def _check_sampling(entries: list[dict]) -> dict:
    for sp in entries:
        unknown = set(sp) - _SAMPLING_KEYS
        if unknown:
            raise _BadRequest(f"sampling_params: unknown keys {sorted(unknown)}")
    shared = [{k: v for k, v in sp.items() if k != "sampling_seed"} for sp in entries]
    if any(s != shared[0] for s in shared):
        raise _BadRequest("sampling_params: the fake serves one set of parameters per request")
    seeds = [sp.get("sampling_seed") for sp in entries]
    if any(s is None for s in seeds) and any(s is not None for s in seeds):
        raise _BadRequest("sampling_params: sampling_seed on some entries only")
    if seeds[0] is not None and shared[0].get("n", 1) != 1:
        raise _BadRequest("sampling_params: a seeded entry must have n = 1")
    return {**shared[0], "sampling_seeds": None if seeds[0] is None else [int(s) for s in seeds]}


def _trim_stop(text: str, stops: list[str]) -> str:
    for stop in stops:
        if stop and text.endswith(stop):
            return text[: -len(stop)]
    return text


def _generate(backend: HFBackend, ids_list: list[list[int]], sp: dict) -> list[dict]:
    n = int(sp.get("n", 1))
    params = SamplingParams(
        temperature=float(sp.get("temperature", 1.0)), top_p=float(sp.get("top_p", 1.0)),
        max_new_tokens=int(sp.get("max_new_tokens", 128)), stop=tuple(sp.get("stop") or ()),
        row_seeds=None if sp.get("sampling_seeds") is None else tuple(sp["sampling_seeds"]),
    )
    out = []
    for ids, group in zip(ids_list, backend.generate(ids_list, params, n=n)):
        for g in group:
            reason = {"type": "stop", "matched": None} if g.finish_reason == "stop" else \
                {"type": "length", "length": len(g.token_ids)}
            text = g.text if sp.get("no_stop_trim", False) else _trim_stop(g.text, list(params.stop))
            out.append({"text": text, "output_ids": g.token_ids, "meta_info": {
                "id": f"fake-{len(out)}", "prompt_tokens": len(ids), "completion_tokens": len(g.token_ids),
                "finish_reason": reason, "input_token_logprobs": [],
                "output_token_logprobs": [[lp, t, None] for lp, t in zip(g.logprobs, g.token_ids)]}})
    return out


def _score(backend: HFBackend, ids_list: list[list[int]], starts: list[int]) -> list[dict]:
    out = []
    for ids, start in zip(ids_list, starts):
        if not 0 <= start < len(ids):
            raise _BadRequest(f"logprob_start_len {start} outside the {len(ids)} input tokens")
        lps = [None] + backend.score([ids[:1]], [ids[1:]])[0]  # lps[j]: log p(ids[j] | ids[:j])
        vals = [None] + lps[start + 1 :]  # SGLang has no logprob for the first token of the range
        out.append({"text": "", "output_ids": [], "meta_info": {
            "id": f"fake-{len(out)}", "prompt_tokens": len(ids), "completion_tokens": 0,
            "finish_reason": {"type": "length", "length": 0},
            "input_token_logprobs": [[v, t, None] for v, t in zip(vals, ids[start:])],
            "output_token_logprobs": []}})
    return out


def create_app(state: FakeSGLangState) -> FastAPI:
    app = FastAPI()

    @app.middleware("http")
    async def _warming_up(request, call_next):
        with state.lock:
            busy = state.not_ready > 0
            state.not_ready -= busy
        if busy:
            state.requests.append((request.url.path, None))
            return Response(status_code=503, content="server is starting")
        return await call_next(request)

    @app.get("/health")
    def health() -> Response:
        state.requests.append(("/health", None))
        return Response(status_code=200)

    @app.get("/get_model_info")
    def model_info() -> dict:
        state.requests.append(("/get_model_info", None))
        return {"model_path": state.model_path, "tokenizer_path": state.model_path, "is_generation": True}

    @app.post("/flush_cache")
    def flush_cache() -> Response:
        state.requests.append(("/flush_cache", None))
        return Response(status_code=200, content="Cache flushed.\n")

    @app.post("/update_weights_from_disk")
    def update_weights(body: dict) -> JSONResponse:
        state.requests.append(("/update_weights_from_disk", body))
        path = body.get("model_path")
        try:
            with state.lock:
                state.backend = HFBackend(path, device=state.backend.device)
                state.model_path = path
        except (InputError, OSError, ValueError, TypeError) as err:
            return JSONResponse(status_code=400, content={
                "success": False, "message": f"Failed to update weights: {err}", "num_paused_requests": 0})
        return JSONResponse({"success": True, "message": "Succeeded to update model weights.",
                             "num_paused_requests": 0})

    @app.post("/generate")
    def generate(body: dict) -> Any:
        state.requests.append(("/generate", body))
        ids = body.get("input_ids")
        single = isinstance(ids, list) and bool(ids) and all(isinstance(t, int) for t in ids)
        ids_list = [ids] if single else ids
        if not isinstance(ids_list, list) or not ids_list or not all(
            isinstance(row, list) and row and all(isinstance(t, int) for t in row) for row in ids_list
        ):
            return _error(400, "input_ids: expected a non-empty list of token id lists")
        if body.get("return_logprob") is not True:
            return _error(400, "the fake answers return_logprob=true requests only")
        try:
            sp = _check_sampling(_per_entry(body.get("sampling_params") or {}, len(ids_list), "sampling_params"))
            starts = _per_entry(body.get("logprob_start_len", -1), len(ids_list), "logprob_start_len")
            with state.lock:
                if sp.get("max_new_tokens") == 0:
                    out = _score(state.backend, ids_list, [int(s) for s in starts])
                else:
                    out = _generate(state.backend, ids_list, sp)
        except (_BadRequest, InputError) as err:
            return _error(400, str(err))
        return out[0] if single and len(out) == 1 else out

    return app


def _bound_socket(port: int = 0) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", port))
    return sock


def free_port() -> int:
    """A port nothing listens on (for "server not up" tests)."""
    with _bound_socket() as sock:
        return sock.getsockname()[1]


@contextlib.contextmanager
def serve_app(app: FastAPI, port: int = 0, startup_timeout_s: float = 30.0) -> Iterator[str]:
    """Run `app` with uvicorn in a daemon thread on 127.0.0.1 (`port`, 0: a free one); yield its URL."""
    sock = _bound_socket(port)
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    deadline = time.monotonic() + startup_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("fake SGLang server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()


@contextlib.contextmanager
def serve_state(state: FakeSGLangState, port: int = 0) -> Iterator[str]:
    with serve_app(create_app(state), port) as url:
        yield url


@contextlib.contextmanager
def serve_backend(backend: HFBackend, **state: Any) -> Iterator[str]:
    """A fake SGLang server answering with `backend`; yields its base URL."""
    with serve_state(FakeSGLangState(backend, **state)) as url:
        yield url
