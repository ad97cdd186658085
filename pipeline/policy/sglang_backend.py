"""PolicyBackend over a running SGLang server's native HTTP API (the paper profile).

Request/response shape used (SGLang docs "Sampling Parameters" / "Native APIs",
docs.sglang.io/basic_usage/sampling_params.html, and sglang's io_struct.GenerateReqInput,
tokenizer_manager.detokenize_logprob_tokens and
scheduler_output_processor_mixin.add_input_logprob_return_values):

POST {url}/generate
  {"input_ids": [[...], ...],
   "sampling_params": {"temperature", "top_p", "max_new_tokens", "stop", "n", "no_stop_trim"},
   "return_logprob": true, "logprob_start_len": int}
-> a list with one dict per sample, prompt-major when n > 1 (prompt i's samples at
   i*n .. i*n+n-1), each {"text", "output_ids"?, "meta_info": {
     "finish_reason": {"type": "stop" | "length" | "abort", ...},
     "output_token_logprobs": [[logprob, token_id, text | null], ...],
     "input_token_logprobs":  [[logprob | null, token_id, text | null], ...]}}
`input_token_logprobs` covers input_ids[logprob_start_len:] and its first entry is always
null (no logprob for the first token of the range), so scoring asks for the range starting
at the last prompt token and keeps the entries of the response tokens.

Seeds (`send_seed`): SGLang's seeded sampler (honoured only when the server runs with
--enable-deterministic-inference) draws each token from hash(sampling_seed, position, token),
so two entries with the same prompt and the same seed get the same sample. A seeded batch is
therefore sent as one entry per sample (n expanded, n=1 each), each carrying its entry's seed
(pipeline.policy.sampling_seeds: `entry_seed(seed, k)`, or the prompt's row seed).

POST {url}/update_weights_from_disk {"model_path"} -> {"success", "message",
"num_paused_requests"} (HTTP 400 with success false when the weights could not be loaded);
the server flushes its prefix cache after a successful update.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from pipeline.errors import InputError
from pipeline.policy.base import Generation, SamplingParams, validate_sampling, validate_scoring
from pipeline.policy.encoding import TokenizerText
from pipeline.policy.sampling_seeds import sample_seeds

RETRY_STATUSES = frozenset({500, 502, 503, 504})
# Failures that mean "nobody answered": a server still starting, restarting or overloaded.
RETRY_ERRORS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.RemoteProtocolError)


class SGLangError(RuntimeError):
    """The SGLang server failed, timed out, or answered something that is not SGLang's shape."""


@dataclass(frozen=True)
class RetryPolicy:
    """Connection errors and HTTP 5xx are retried `attempts - 1` times, waiting
    backoff_s, 2*backoff_s, ... (at most max_backoff_s) in between."""

    attempts: int = 8
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0

    def __post_init__(self) -> None:
        if self.attempts < 1 or self.backoff_s < 0 or self.max_backoff_s < 0:
            raise InputError(f"retry: expected attempts >= 1 and waits >= 0, got {self}")

    def wait_s(self, failures: int) -> float:
        return min(self.backoff_s * 2 ** (failures - 1), self.max_backoff_s)


def _sglang_sampling_params(params: SamplingParams, n: int) -> dict[str, Any]:
    sampling: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens,
        "n": n,
        "no_stop_trim": True,  # keep the stop string, as the HF backend does
    }
    if params.stop:
        sampling["stop"] = list(params.stop)
    return sampling


def _logprob_triples(meta: dict, key: str, where: str) -> list[list]:
    triples = meta.get(key)
    if not isinstance(triples, list):
        raise SGLangError(f"{where}: meta_info.{key} missing; was return_logprob honoured?")
    return triples


class SGLangBackend(TokenizerText):
    """Same interface as HFBackend; tokenisation happens here, the server sees only ids."""

    def __init__(
        self,
        url: str,
        tokenizer_path: str | os.PathLike | None = None,
        *,
        tokenizer: PreTrainedTokenizerBase | None = None,
        client: httpx.Client | None = None,
        timeout_s: float = 600.0,
        max_batch_size: int = 512,
        send_seed: bool = False,
        retry: RetryPolicy = RetryPolicy(),
        sleep: Callable[[float], None] = time.sleep,
    ):
        if tokenizer is None:
            if tokenizer_path is None:
                raise InputError("tokenizer_path: expected a local tokenizer folder (or pass tokenizer=)")
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
        self.tokenizer = tokenizer
        self.url = url.rstrip("/")
        self.timeout_s = timeout_s
        self.client = client or httpx.Client(timeout=timeout_s)
        self.max_batch_size = max_batch_size
        self.send_seed = send_seed
        self.retry = retry
        self._sleep = sleep

    # -- HTTP -----------------------------------------------------------------------------
    def _call(self, method: str, path: str, payload: Any = None, accept: tuple[int, ...] = ()) -> httpx.Response:
        """One request, retried on connection errors and 5xx; other failures raise SGLangError
        naming the URL. Statuses in `accept` are returned to the caller as they are."""
        url = f"{self.url}{path}"
        failures = 0
        while True:
            try:
                response = self.client.request(method, url, json=payload)
            except RETRY_ERRORS as err:
                problem = f"{type(err).__name__}: {err}"
            except httpx.TimeoutException as err:
                raise SGLangError(
                    f"{url}: no answer within the {self.timeout_s:g}s timeout ({type(err).__name__})"
                ) from err
            except httpx.HTTPError as err:
                raise SGLangError(f"{url}: request failed ({type(err).__name__}: {err})") from err
            else:
                if response.status_code == 200 or response.status_code in accept:
                    return response
                problem = f"HTTP {response.status_code}: {response.text[:500]}"
                if response.status_code not in RETRY_STATUSES:
                    raise SGLangError(f"{url}: {problem}")
            failures += 1
            if failures >= self.retry.attempts:
                raise SGLangError(f"{url}: server not available after {failures} attempts; last: {problem}")
            self._sleep(self.retry.wait_s(failures))

    def _json(self, response: httpx.Response) -> Any:
        try:
            return response.json()
        except ValueError:
            raise SGLangError(f"{response.request.url}: answer is not JSON: {response.text[:200]!r}") from None

    def _post_generate(self, payload: dict[str, Any], expected: int) -> list[dict]:
        body = self._json(self._call("POST", "/generate", payload))
        if isinstance(body, dict):
            body = [body]
        if not isinstance(body, list) or len(body) != expected:
            got = len(body) if isinstance(body, list) else type(body).__name__
            raise SGLangError(f"{self.url}/generate: expected {expected} outputs, got {got}")
        return body

    def model_info(self) -> dict[str, Any]:
        """GET /get_model_info: {"model_path", "tokenizer_path", "is_generation", ...}."""
        info = self._json(self._call("GET", "/get_model_info"))
        if not isinstance(info, dict) or not isinstance(info.get("model_path"), str):
            raise SGLangError(f"{self.url}/get_model_info: expected an object with 'model_path', got {info!r:.200}")
        return info

    # -- weights --------------------------------------------------------------------------
    def sync_weights(self, checkpoint_dir: str | os.PathLike) -> dict[str, Any]:
        """Make the server load the HF checkpoint folder `checkpoint_dir` (after a training
        step saved it); the server must see the same path. Returns the server's answer."""
        folder = Path(checkpoint_dir).resolve()
        if not (folder / "config.json").is_file():
            raise InputError(f"{folder}: expected a saved HF checkpoint folder with config.json")
        response = self._call("POST", "/update_weights_from_disk", {"model_path": str(folder)}, accept=(400,))
        body = self._json(response)
        if not isinstance(body, dict) or not isinstance(body.get("success"), bool):
            raise SGLangError(
                f"{self.url}/update_weights_from_disk: expected {{'success', 'message'}}, got {body!r:.200}"
            )
        if not body["success"]:
            raise SGLangError(
                f"{self.url}/update_weights_from_disk: weights of {folder} not loaded "
                f"(HTTP {response.status_code}): {body.get('message', '')}"
            )
        return body

    def ensure_weights(self, model_dir: str | os.PathLike) -> bool:
        """Point the server at `model_dir` (a model folder or a model_ref.json folder) unless
        it already serves it; True when weights were reloaded."""
        from pipeline.policy.model_ref import resolve_model_dir

        folder = resolve_model_dir(model_dir).resolve()
        if Path(self.model_info()["model_path"]).resolve() == folder:
            return False
        self.sync_weights(folder)
        return True

    def flush_cache(self) -> None:
        """POST /flush_cache (SGLang refuses with 400 while requests are running)."""
        self._call("POST", "/flush_cache")

    # -- PolicyBackend ----------------------------------------------------------------------
    def _generate_payload(self, chunk: list[list[int]], params: SamplingParams, n: int,
                          seeds: list[int] | None) -> dict:
        sampling = _sglang_sampling_params(params, n)
        if seeds is not None:
            entries = [ids for ids in chunk for _ in range(n)]
            sampling = [{**sampling, "n": 1, "sampling_seed": s} for s in seeds]
        else:
            entries = chunk
        return {
            "input_ids": entries,
            "sampling_params": sampling,
            "return_logprob": True,
            "logprob_start_len": -1,  # no prompt logprobs needed
        }

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        validate_sampling(params, n, len(prompts))
        results: list[list[Generation]] = []
        seeds = sample_seeds(params, len(prompts), n) if self.send_seed else None
        per_request = max(1, self.max_batch_size // n)
        for start in range(0, len(prompts), per_request):
            chunk = [list(map(int, p)) for p in prompts[start : start + per_request]]
            chunk_seeds = None if seeds is None else seeds[start * n : (start + len(chunk)) * n]
            outputs = self._post_generate(self._generate_payload(chunk, params, n, chunk_seeds),
                                          expected=len(chunk) * n)
            gens = [self._generation(out, f"output {start * n + i}") for i, out in enumerate(outputs)]
            results.extend(gens[i * n : (i + 1) * n] for i in range(len(chunk)))
        return results

    def _generation(self, output: dict, where: str) -> Generation:
        if not isinstance(output, dict):
            raise SGLangError(f"{where}: expected an object, got {type(output).__name__}")
        meta = output.get("meta_info") or {}
        triples = _logprob_triples(meta, "output_token_logprobs", where)
        try:
            token_ids = [int(t[1]) for t in triples]
            logprobs = [float(t[0]) for t in triples]
        except (TypeError, ValueError, IndexError):
            raise SGLangError(f"{where}: output_token_logprobs are not [logprob, token_id, text] triples") from None
        if "output_ids" in output and list(output["output_ids"]) != token_ids:
            raise SGLangError(f"{where}: output_ids disagree with output_token_logprobs")
        reason = (meta.get("finish_reason") or {}).get("type", "length")
        if reason == "abort":
            raise SGLangError(f"{where}: request aborted: {meta.get('finish_reason')}")
        return Generation(
            token_ids=token_ids,
            logprobs=logprobs,
            text=self.decode(token_ids),
            finish_reason="stop" if reason == "stop" else "length",
        )

    def score(
        self,
        prompts: Sequence[Sequence[int]],
        responses: Sequence[Sequence[int]],
        temperature: float = 1.0,
    ) -> list[list[float]]:
        """Teacher-forced log-probs of the response tokens (one prefill, no generation).
        SGLang's input logprobs are at temperature 1; other temperatures are refused."""
        if temperature != 1.0:
            raise InputError(f"temperature: the SGLang backend scores at 1.0 only, got {temperature}")
        validate_scoring(prompts, responses, temperature)
        scores: list[list[float]] = [[] for _ in prompts]
        todo = [i for i, r in enumerate(responses) if len(r) > 0]
        # logprob_start_len is one number per request entry, so each pair gets its own entry
        for start in range(0, len(todo), self.max_batch_size):
            chunk = todo[start : start + self.max_batch_size]
            outputs = self._post_generate(
                {
                    "input_ids": [list(map(int, prompts[i])) + list(map(int, responses[i])) for i in chunk],
                    "sampling_params": {"max_new_tokens": 0, "temperature": 0.0},
                    "return_logprob": True,
                    "logprob_start_len": [len(prompts[i]) - 1 for i in chunk],
                },
                expected=len(chunk),
            )
            for i, output in zip(chunk, outputs):
                scores[i] = self._response_scores(output, list(responses[i]), f"score {i}")
        return scores

    @staticmethod
    def _response_scores(output: dict, response: list[int], where: str) -> list[float]:
        triples = _logprob_triples(output.get("meta_info") or {}, "input_token_logprobs", where)
        tail = triples[-len(response) :]
        if len(tail) != len(response) or [int(t[1]) for t in tail] != [int(t) for t in response]:
            raise SGLangError(f"{where}: input_token_logprobs do not end with the response tokens")
        if any(t[0] is None for t in tail):
            raise SGLangError(f"{where}: a response token has no logprob (logprob_start_len too late?)")
        return [float(t[0]) for t in tail]
