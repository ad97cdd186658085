"""SGLangBackend over real HTTP: retries while the server is not up, clear errors (4xx, 5xx,
timeouts, malformed answers), weight sync from disk, and evaluation's choice of backend."""

from __future__ import annotations

import contextlib
import random
import time

import pytest
import torch
from fastapi import FastAPI
from fastapi.responses import PlainTextResponse

from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.engine.backend import EngineBackend
from pipeline.errors import InputError
from pipeline.policy.base import SamplingParams
from pipeline.policy.hf_backend import HFBackend, save_hf_folder
from pipeline.policy.model_ref import write_model_ref
from pipeline.policy.sglang_backend import RetryPolicy, SGLangBackend, SGLangError
from pipeline.stage_io import inputs as stage_inputs
from tests.helpers.configs import PARAMS
from tests.helpers.fake_sglang import FakeSGLangState, free_port, serve_app, serve_state

ENGINE = PARAMS.engine

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=10)
FAST = RetryPolicy(attempts=4, backoff_s=0.01, max_backoff_s=0.05)


def tiny_folder(tokenizer, out, seed: int):
    model = build_tiny_qwen3(tokenizer, hidden_size=32, num_layers=1, num_heads=4, num_kv_heads=2,
                             intermediate_size=64, max_position_embeddings=64, seed=seed)
    torch.manual_seed(seed)
    with torch.no_grad():  # larger weights than the init, so the greedy output depends on them
        for param in model.parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.2)
    return save_hf_folder(model, tokenizer, out).resolve()


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    """Two saved checkpoints of the same architecture with different weights."""
    rng = random.Random(1)
    words = ["ka", "lo", "mi", "ra", "tu", "ne"]
    texts = [" ".join(rng.choice(words) + rng.choice(words) for _ in range(8)) for _ in range(100)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=320)
    root = tmp_path_factory.mktemp("ckpt")
    return tiny_folder(tokenizer, root / "step1", seed=1), tiny_folder(tokenizer, root / "step2", seed=2)


@pytest.fixture(scope="module")
def step1(folders):
    return HFBackend(folders[0])


@pytest.fixture(scope="module")
def prompts(step1):
    return [step1.encode_prompt(t) for t in ("kalo mira", "tune", "rakalo mitu nera")]


def greedy_ids(backend, prompts) -> list[list[int]]:
    return [g[0].token_ids for g in backend.generate(prompts, GREEDY)]


def waits_recorder() -> tuple[list[float], object]:
    waits: list[float] = []
    return waits, waits.append


class _StubTokenizer:
    """Enough of a tokenizer for requests whose answers are never decoded."""

    def decode(self, ids, skip_special_tokens=True) -> str:
        return " ".join(map(str, ids))


# -- retries and errors -------------------------------------------------------------------------
def test_a_server_still_starting_is_retried_with_backoff(step1, prompts):
    state = FakeSGLangState(step1, not_ready=3)
    waits, sleep = waits_recorder()
    with serve_state(state) as url:
        remote = SGLangBackend(url, tokenizer=step1.tokenizer, retry=FAST, sleep=sleep)
        assert greedy_ids(remote, prompts) == greedy_ids(step1, prompts)
    assert [path for path, body in state.requests] == ["/generate"] * 4  # three 503s, then the answer
    assert [body is None for _, body in state.requests] == [True, True, True, False]
    assert waits == [0.01, 0.02, 0.04]


def test_a_server_that_comes_up_later_is_reached(step1, prompts):
    port = free_port()  # nothing listens yet: connection refused
    state = FakeSGLangState(step1)
    with contextlib.ExitStack() as stack:
        started: list[str] = []

        def start_server_while_waiting(seconds: float) -> None:
            if not started:
                started.append(stack.enter_context(serve_state(state, port)))

        remote = SGLangBackend(f"http://127.0.0.1:{port}", tokenizer=step1.tokenizer, retry=FAST,
                               sleep=start_server_while_waiting)
        assert greedy_ids(remote, prompts) == greedy_ids(step1, prompts)
        assert started and [p for p, _ in state.requests] == ["/generate"]


def test_nobody_listening_names_the_url_after_the_last_attempt(step1, prompts):
    url = f"http://127.0.0.1:{free_port()}"
    waits, sleep = waits_recorder()
    remote = SGLangBackend(url, tokenizer=step1.tokenizer, retry=FAST, sleep=sleep)
    with pytest.raises(SGLangError, match=rf"{url}/generate: server not available after 4 attempts.*ConnectError"):
        remote.generate(prompts, GREEDY)
    assert len(waits) == 3


def test_http_5xx_is_retried_then_reported():
    app, calls = FastAPI(), []

    @app.post("/generate")
    def generate(body: dict):
        calls.append(body)
        return PlainTextResponse("scheduler crashed", status_code=500)

    with serve_app(app) as url:
        remote = SGLangBackend(url, tokenizer=_StubTokenizer(), retry=FAST, sleep=lambda s: None)
        message = r"/generate: server not available after 4 attempts; last: HTTP 500: scheduler crashed"
        with pytest.raises(SGLangError, match=message):
            remote.generate([[1, 2]], GREEDY)
    assert len(calls) == 4


def test_http_4xx_names_url_and_status_and_is_not_retried(step1):
    state = FakeSGLangState(step1)
    with serve_state(state) as url:
        remote = SGLangBackend(url, tokenizer=step1.tokenizer, retry=FAST, sleep=lambda s: None)
        with pytest.raises(SGLangError, match=rf"^{url}/generate: HTTP 400: .*input_ids"):
            remote.generate([[]], GREEDY)  # the server refuses an empty prompt
    assert len(state.requests) == 1


def test_a_timeout_is_an_error_naming_the_url_and_is_not_retried():
    app, calls = FastAPI(), []

    @app.post("/generate")
    def generate(body: dict):
        calls.append(body)
        time.sleep(1.5)
        return []

    with serve_app(app) as url:
        remote = SGLangBackend(url, tokenizer=_StubTokenizer(), timeout_s=0.3, retry=FAST, sleep=lambda s: None)
        with pytest.raises(SGLangError, match=rf"{url}/generate: no answer within the 0.3s timeout \(ReadTimeout\)"):
            remote.generate([[1, 2]], GREEDY)
    assert len(calls) == 1


@pytest.mark.parametrize("answer, message", [
    (PlainTextResponse("<html>proxy error</html>"), "answer is not JSON"),
    ({"error": "odd"}, "meta_info.output_token_logprobs missing"),  # a dict is read as one output
    ([{"meta_info": {"output_token_logprobs": [["x", 3, None]]}}], "not \\[logprob, token_id, text\\] triples"),
    ([{"meta_info": {"output_token_logprobs": [], "finish_reason": {"type": "abort"}}}], "aborted"),
])
def test_malformed_answers_raise_at_once(answer, message):
    app, calls = FastAPI(), []

    @app.post("/generate")
    def generate(body: dict):
        calls.append(body)
        return answer

    with serve_app(app) as url:
        remote = SGLangBackend(url, tokenizer=_StubTokenizer(), retry=FAST, sleep=lambda s: None)
        with pytest.raises(SGLangError, match=message):
            remote.generate([[1, 2]], GREEDY)
    assert len(calls) == 1


# -- weight sync ----------------------------------------------------------------------------------
def test_sync_weights_reloads_the_new_checkpoint(folders, step1, prompts):
    first, second = folders
    state = FakeSGLangState(HFBackend(first), model_path=str(first))
    with serve_state(state) as url:
        remote = SGLangBackend(url, tokenizer=step1.tokenizer)
        before = greedy_ids(remote, prompts)
        answer = remote.sync_weights(second)
        after = greedy_ids(remote, prompts)
        info = remote.model_info()
    assert before == greedy_ids(step1, prompts)
    assert after == greedy_ids(HFBackend(second), prompts) and after != before
    assert answer["success"] is True and "message" in answer
    assert ("/update_weights_from_disk", {"model_path": str(second)}) in state.requests
    assert info["model_path"] == str(second)


def test_sync_weights_errors(folders, step1, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text("{not json")
    state = FakeSGLangState(step1, model_path=str(folders[0]))
    with serve_state(state) as url:
        remote = SGLangBackend(url, tokenizer=step1.tokenizer, retry=FAST, sleep=lambda s: None)
        with pytest.raises(InputError, match="config.json"):
            remote.sync_weights(tmp_path / "missing")
        assert state.requests == []  # checked before asking the server
        message = rf"update_weights_from_disk: weights of {broken} not loaded \(HTTP 400\)"
        with pytest.raises(SGLangError, match=message):
            remote.sync_weights(broken)
        assert state.model_path == str(folders[0])  # the old weights stay


def test_ensure_weights_switches_only_when_another_folder_is_served(folders, step1, tmp_path):
    first, second = folders
    ref_dir = tmp_path / "ref"
    write_model_ref(second, ref_dir)  # a model_ref.json folder pointing at `second`
    state = FakeSGLangState(step1, model_path=str(first))
    with serve_state(state) as url:
        remote = SGLangBackend(url, tokenizer=step1.tokenizer)
        assert remote.ensure_weights(first) is False
        assert remote.ensure_weights(ref_dir) is True
        assert remote.ensure_weights(second) is False
        remote.flush_cache()
    updates = [body for path, body in state.requests if path == "/update_weights_from_disk"]
    assert updates == [{"model_path": str(second)}]
    assert state.requests[-1] == ("/flush_cache", None)


# -- evaluation's backend --------------------------------------------------------------------------
def test_open_eval_backend_uses_sglang_when_the_url_is_set(folders, step1, prompts, monkeypatch):
    first, second = folders
    monkeypatch.delenv(stage_inputs.SGLANG_URL_ENV, raising=False)
    in_process = stage_inputs.open_eval_backend(first, ENGINE)
    assert isinstance(in_process, EngineBackend) and isinstance(in_process, HFBackend)
    state = FakeSGLangState(HFBackend(first), model_path=str(first))
    with serve_state(state) as url:
        monkeypatch.setenv(stage_inputs.SGLANG_URL_ENV, url)
        backend = stage_inputs.open_eval_backend(second, ENGINE)
        assert isinstance(backend, SGLangBackend) and backend.url == url
        assert greedy_ids(backend, prompts) == greedy_ids(HFBackend(second), prompts)
    assert state.model_path == str(second)


def test_open_eval_backend_names_a_missing_model_folder(tmp_path, monkeypatch):
    monkeypatch.setenv(stage_inputs.SGLANG_URL_ENV, "http://127.0.0.1:1")
    with pytest.raises(InputError, match="model folder missing"):
        stage_inputs.open_eval_backend(tmp_path / "nothing", ENGINE)
