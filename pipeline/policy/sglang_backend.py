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
"""

from __future__ import annotations

import os
from typing import Any, Sequence

import httpx
from transformers import AutoTokenizer, PreTrainedTokenizerBase

from pipeline.io import InputError
from pipeline.policy.base import Generation, SamplingParams
from pipeline.policy.encoding import TokenizerText


class SGLangError(RuntimeError):
    """The server answered something that is not SGLang's /generate shape."""


def _sglang_sampling_params(params: SamplingParams, n: int, send_seed: bool) -> dict[str, Any]:
    sampling: dict[str, Any] = {
        "temperature": params.temperature,
        "top_p": params.top_p,
        "max_new_tokens": params.max_new_tokens,
        "n": n,
        "no_stop_trim": True,  # keep the stop string, as the HF backend does
    }
    if params.stop:
        sampling["stop"] = list(params.stop)
    if send_seed and params.seed is not None:
        # only recent SGLang knows `sampling_seed`; older servers reject unknown keys
        sampling["sampling_seed"] = int(params.seed)
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
    ):
        if tokenizer is None:
            if tokenizer_path is None:
                raise InputError("tokenizer_path: expected a local tokenizer folder (or pass tokenizer=)")
            tokenizer = AutoTokenizer.from_pretrained(tokenizer_path, local_files_only=True)
        self.tokenizer = tokenizer
        self.url = url.rstrip("/")
        self.client = client or httpx.Client(timeout=timeout_s)
        self.max_batch_size = max_batch_size
        self.send_seed = send_seed

    def _post_generate(self, payload: dict[str, Any], expected: int) -> list[dict]:
        response = self.client.post(f"{self.url}/generate", json=payload)
        if response.status_code != 200:
            raise SGLangError(f"{self.url}/generate: HTTP {response.status_code}: {response.text[:500]}")
        body = response.json()
        if isinstance(body, dict):
            body = [body]
        if not isinstance(body, list) or len(body) != expected:
            got = len(body) if isinstance(body, list) else type(body).__name__
            raise SGLangError(f"{self.url}/generate: expected {expected} outputs, got {got}")
        return body

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        if n < 1:
            raise InputError(f"n: expected >= 1 samples per prompt, got {n}")
        results: list[list[Generation]] = []
        per_request = max(1, self.max_batch_size // n)
        for start in range(0, len(prompts), per_request):
            chunk = [list(map(int, p)) for p in prompts[start : start + per_request]]
            outputs = self._post_generate(
                {
                    "input_ids": chunk,
                    "sampling_params": _sglang_sampling_params(params, n, self.send_seed),
                    "return_logprob": True,
                    "logprob_start_len": -1,  # no prompt logprobs needed
                },
                expected=len(chunk) * n,
            )
            gens = [self._generation(out, f"output {start * n + i}") for i, out in enumerate(outputs)]
            results.extend(gens[i * n : (i + 1) * n] for i in range(len(chunk)))
        return results

    def _generation(self, output: dict, where: str) -> Generation:
        meta = output.get("meta_info") or {}
        triples = _logprob_triples(meta, "output_token_logprobs", where)
        token_ids = [int(t[1]) for t in triples]
        logprobs = [float(t[0]) for t in triples]
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
        if len(prompts) != len(responses):
            raise InputError(f"responses: expected one per prompt ({len(prompts)}), got {len(responses)}")
        scores: list[list[float]] = [[] for _ in prompts]
        todo = [i for i, r in enumerate(responses) if len(r) > 0]
        for i in todo:
            if len(prompts[i]) == 0:
                raise InputError(f"prompts[{i}]: expected at least one token, got an empty prompt")
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
