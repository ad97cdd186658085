"""HFBackend (batched sampling loop, scoring), the shared log-prob function, and the SGLang
backend against a fake server that answers in SGLang's /generate shape."""

from __future__ import annotations

import dataclasses
import random
import warnings

import numpy as np
import pytest
import torch
from fastapi import FastAPI
from fastapi.testclient import TestClient

from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.errors import InputError
from pipeline.policy.base import PolicyBackend, SamplingParams
from pipeline.policy.hf_backend import HFBackend, save_hf_folder
from pipeline.policy.logprobs import pack_prompt_response, response_logprobs
from pipeline.policy.next_token import sample_next_tokens
from pipeline.policy.sampling_seeds import entry_seed, keyed_uniforms, sample_seeds
from pipeline.policy.sglang_backend import SGLangBackend, SGLangError
from tests.helpers.fake_sglang import FakeSGLangState, serve_state

GREEDY = SamplingParams(temperature=0.0, max_new_tokens=12)


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi"]
    texts = [" ".join(rng.choice(syllables) + rng.choice(syllables) for _ in range(10)) + "." for _ in range(200)]
    return train_bpe_tokenizer(texts, vocab_size=400)


@pytest.fixture(scope="module")
def backend(tokenizer):
    model = build_tiny_qwen3(
        tokenizer, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, max_position_embeddings=96, seed=0,
    )
    # larger random weights: a freshly initialised tied model just repeats its last token
    torch.manual_seed(0)
    with torch.no_grad():
        for param in model.parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.15)
    return HFBackend(model, tokenizer)


@pytest.fixture(scope="module")
def prompts(backend):
    texts = ["kalo", "mira tuso nevi kalo mira", "vi", "<search>kalo mira</search> tu ne so vi ka lo mi"]
    return [backend.encode_prompt(t) for t in texts]


def max_abs_diff(a: list[float], b: list[float]) -> float:
    assert len(a) == len(b)
    return max((abs(x - y) for x, y in zip(a, b)), default=0.0)


def test_implements_the_protocol(backend):
    assert isinstance(backend, PolicyBackend)
    ids = backend.encode_prompt("kalo mira")
    assert ids[0] == backend.tokenizer.bos_token_id
    assert backend.encode("kalo mira") == ids[1:]
    assert backend.decode(backend.encode("x <answer>y</answer>\n")) == "x <answer>y</answer>\n"


def unpadded_logprobs(model, prompt: list[int], response: list[int]) -> list[float]:
    """Reference: one sequence, no padding, plain forward."""
    ids = torch.tensor([prompt + response])
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0, :-1].float(), -1)
    return logp[len(prompt) - 1 :].gather(-1, ids[0, len(prompt) :, None]).squeeze(-1).tolist()


def test_score_matches_greedy_generation_logprobs_across_padding(backend, prompts):
    assert len({len(p) for p in prompts}) == len(prompts)  # different lengths: real left padding
    gens = [g[0] for g in backend.generate(prompts, GREEDY)]
    assert all(len(g.token_ids) == GREEDY.max_new_tokens for g in gens)
    scores = backend.score(prompts, [g.token_ids for g in gens])
    for prompt, gen, score in zip(prompts, gens, scores):
        assert max_abs_diff(gen.logprobs, score) < 1e-4
        assert max_abs_diff(unpadded_logprobs(backend.model, prompt, gen.token_ids), score) < 1e-4


def test_score_matches_tempered_sampling_logprobs(backend, prompts):
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=10, seed=11)
    gens = [g for group in backend.generate(prompts, params, n=2) for g in group]
    scores = backend.score([p for p in prompts for _ in range(2)], [g.token_ids for g in gens], temperature=0.7)
    for gen, score in zip(gens, scores):
        assert max_abs_diff(gen.logprobs, score) < 1e-4
    at_t1 = backend.score([prompts[0]], [gens[0].token_ids])[0]
    assert max_abs_diff(at_t1, gens[0].logprobs) > 1e-3  # temperature really enters


def test_batched_greedy_equals_one_prompt_at_a_time(backend, prompts):
    batched = [g[0].token_ids for g in backend.generate(prompts, GREEDY)]
    alone = [backend.generate([p], GREEDY)[0][0].token_ids for p in prompts]
    assert batched == alone
    assert len({tuple(t) for t in batched}) > 1  # the prompts do lead to different outputs


def test_chunked_batches_give_the_same_result(backend, prompts):
    small = HFBackend(backend.model, backend.tokenizer, max_batch_size=3, max_batch_tokens=30)
    assert len(list(small._score_chunks([(p, [5, 6, 7]) for p in prompts]))) >= 2
    assert [g[0].token_ids for g in small.generate(prompts, GREEDY)] == [
        g[0].token_ids for g in backend.generate(prompts, GREEDY)
    ]
    chunked = small.score(prompts, [[5, 6, 7]] * len(prompts))
    whole = backend.score(prompts, [[5, 6, 7]] * len(prompts))
    assert all(max_abs_diff(a, b) < 1e-5 for a, b in zip(chunked, whole))


def first_fresh_stop(backend, tokens: list[int]) -> tuple[str, int] | None:
    """A stop string ending inside token k (spanning tokens k-1 and k), absent before."""
    for k in range(1, len(tokens)):
        before, upto = backend.decode(tokens[:k]), backend.decode(tokens[: k + 1])
        if len(upto) > len(before) >= 1 and upto.startswith(before):
            stop = upto[len(before) - 1 :]
            if stop not in before and stop.strip() and "\ufffd" not in stop:
                return stop, k
    return None


def test_stop_string_ends_one_row_while_others_continue(backend, prompts):
    params = SamplingParams(temperature=0.0, max_new_tokens=16)
    free = [g[0] for g in backend.generate(prompts, params)]
    found = first_fresh_stop(backend, free[1].token_ids)
    assert found is not None
    stop, k = found
    with_stop = SamplingParams(temperature=0.0, max_new_tokens=16, stop=(stop,))
    stopped = [g[0] for g in backend.generate(prompts, with_stop)]
    assert stopped[1].token_ids == free[1].token_ids[: k + 1]
    assert stopped[1].finish_reason == "stop" and stopped[1].text.endswith(stop)
    assert stopped[1].logprobs == pytest.approx(free[1].logprobs[: k + 1], abs=1e-5)
    untouched = [i for i, g in enumerate(free) if stop not in g.text]
    assert len(untouched) >= 2
    for i in untouched:  # rows that never meet the stop string carry on as if alone
        assert stopped[i].token_ids == free[i].token_ids and stopped[i].finish_reason == "length"
        assert stopped[i].logprobs == pytest.approx(free[i].logprobs, abs=1e-5)


def test_eos_stops_a_row(backend, prompts):
    free = backend.generate([prompts[0]], GREEDY)[0][0]
    k = 3
    first = free.token_ids.index(free.token_ids[k])
    saved = backend.eos_ids
    backend.eos_ids = {free.token_ids[k]}
    try:
        gen = backend.generate([prompts[0]], GREEDY)[0][0]
    finally:
        backend.eos_ids = saved
    assert gen.token_ids == free.token_ids[: first + 1] and gen.finish_reason == "stop"


def test_n_samples_per_prompt_are_grouped_and_distinct(backend, prompts):
    out = backend.generate(prompts[:2], SamplingParams(temperature=1.0, max_new_tokens=8, seed=3), n=4)
    assert [len(group) for group in out] == [4, 4]
    for group in out:
        assert len({tuple(g.token_ids) for g in group}) > 1
        assert all(len(g.token_ids) == len(g.logprobs) for g in group)


def test_seeded_sampling_is_reproducible(backend, prompts):
    params = SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=10, seed=7)
    a = backend.generate(prompts, params, n=2)
    b = backend.generate(prompts, params, n=2)
    c = backend.generate(prompts, SamplingParams(temperature=1.0, top_p=0.95, max_new_tokens=10, seed=8), n=2)
    ids = lambda out: [[g.token_ids for g in group] for group in out]  # noqa: E731
    assert ids(a) == ids(b)
    assert ids(a) != ids(c)


@pytest.mark.parametrize("top_p, expected", [(1.0, [0.5, 0.3, 0.15, 0.05]), (0.7, [0.625, 0.375, 0.0, 0.0])])
def test_sampler_draws_from_the_tempered_nucleus(top_p, expected):
    probs = torch.tensor([0.5, 0.3, 0.15, 0.05])
    logits = (probs.log() * 2.0).expand(40000, -1)  # temperature 2 undoes the factor 2
    uniforms = torch.from_numpy(keyed_uniforms(np.arange(40000), position=3))
    tokens, logps = sample_next_tokens(logits, 2.0, top_p, uniforms)
    freq = torch.bincount(tokens, minlength=4).float() / len(tokens)
    assert torch.allclose(freq, torch.tensor(expected), atol=0.01)
    assert torch.allclose(logps, probs.log()[tokens], atol=1e-5)  # full tempered distribution


def test_keyed_uniforms_are_uniform_and_differ_by_position():
    u0, u1 = keyed_uniforms(np.arange(20000), 0), keyed_uniforms(np.arange(20000), 1)
    assert u0.dtype == np.float32 and 0 <= u0.min() and u0.max() < 1
    assert abs(u0.mean() - 0.5) < 0.01 and abs(np.corrcoef(u0, u1)[0, 1]) < 0.03
    assert np.array_equal(u0, keyed_uniforms(np.arange(20000), 0))


def test_sample_seeds_follow_row_seeds_else_the_call_seed():
    assert sample_seeds(SamplingParams(), 2, 2) is None
    assert sample_seeds(SamplingParams(seed=7), 2, 2) == [entry_seed(7, k) for k in range(4)]
    assert sample_seeds(SamplingParams(seed=7, row_seeds=(3, 9)), 2, 2) == [3, entry_seed(3, 1), 9, entry_seed(9, 1)]
    with pytest.raises(InputError, match="row_seeds: expected one per prompt"):
        sample_seeds(SamplingParams(row_seeds=(3,)), 2, 1)


def test_a_seeded_row_does_not_depend_on_its_batch(backend, prompts):
    """Common random numbers: a row's sample depends on its own seed, not its neighbours."""
    params = SamplingParams(temperature=1.0, max_new_tokens=12)
    both = backend.generate(prompts[:2], dataclasses.replace(params, row_seeds=(5, 9)))
    alone = backend.generate(prompts[1:2], dataclasses.replace(params, row_seeds=(9,)))
    swapped = backend.generate(prompts[:2], dataclasses.replace(params, row_seeds=(9, 5)))
    assert both[1][0].token_ids == alone[0][0].token_ids
    assert swapped[0][0].token_ids != both[0][0].token_ids or swapped[1][0].token_ids != both[1][0].token_ids


def test_tiny_top_p_is_greedy(backend, prompts):
    nucleus = backend.generate(prompts, SamplingParams(temperature=1.0, top_p=1e-6, max_new_tokens=8, seed=1))
    greedy = backend.generate(prompts, SamplingParams(temperature=0.0, max_new_tokens=8))
    assert [g[0].token_ids for g in nucleus] == [g[0].token_ids for g in greedy]


def test_long_prompts_are_truncated_from_the_left_with_a_warning(backend):
    long_prompt = backend.encode_prompt("kalo mira " * 200)
    assert len(long_prompt) > backend.max_context
    with pytest.warns(UserWarning, match="truncated from the left"):
        gen = backend.generate([long_prompt], GREEDY)[0][0]
    kept = long_prompt[-(backend.max_context - GREEDY.max_new_tokens) :]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert gen.token_ids == backend.generate([kept], GREEDY)[0][0].token_ids
    with pytest.warns(UserWarning):
        assert len(backend.score([long_prompt], [[5, 6]])[0]) == 2


def test_bad_arguments_raise_input_error(backend, prompts):
    with pytest.raises(InputError, match="n:"):
        backend.generate(prompts, GREEDY, n=0)
    with pytest.raises(InputError, match="top_p"):
        backend.generate(prompts, SamplingParams(top_p=0.0))
    with pytest.raises(InputError, match="responses"):
        backend.score(prompts, [[1]])
    with pytest.raises(InputError, match="config.json"):
        HFBackend("/nonexistent/model/folder")


def test_loads_a_saved_folder_and_uses_a_chat_template(backend, tokenizer, tmp_path, prompts):
    folder = save_hf_folder(backend.model, tokenizer, tmp_path / "m")
    loaded = HFBackend(folder)
    assert [g[0].token_ids for g in loaded.generate(prompts, GREEDY)] == [
        g[0].token_ids for g in backend.generate(prompts, GREEDY)
    ]
    loaded.tokenizer.chat_template = "{% for m in messages %}<task>{{ m['content'] }}</task>{% endfor %}<think>"
    ids = loaded.encode_prompt("kalo")
    assert loaded.decode(ids) == "<task>kalo</task><think>"


def test_response_logprobs_with_grad_and_entropy(backend, prompts):
    responses = [[5, 6, 7], [8], [9, 10, 11, 12, 13], [14, 15]]
    batch = pack_prompt_response(prompts, responses, backend.pad_id)
    assert batch.response_mask.sum(1).tolist() == [3, 1, 5, 2]
    logp, entropy = response_logprobs(
        backend.model, batch.input_ids, batch.attention_mask, batch.response_length, compute_entropy=True
    )
    assert logp.shape == entropy.shape == (4, 5) and logp.requires_grad
    mask = batch.response_mask.bool()
    max_entropy = torch.log(torch.tensor(float(len(backend.tokenizer))))
    assert torch.all(entropy[mask] > 0) and torch.all(entropy[mask] <= max_entropy + 1e-4)
    scores = backend.score(prompts, responses)
    for row, score in enumerate(scores):
        assert max_abs_diff(logp[row, : len(responses[row])].tolist(), score) < 1e-5
    (logp[mask].sum() + entropy[mask].sum()).backward()
    grad = backend.model.model.embed_tokens.weight.grad
    assert grad is not None and grad.abs().sum() > 0
    backend.model.zero_grad(set_to_none=True)


# -- SGLang over HTTP ------------------------------------------------------------------
# The fake server (tests/helpers/fake_sglang.py) answers in SGLang's shapes with this HF backend's numbers.
@pytest.fixture()
def sglang(backend):
    state = FakeSGLangState(backend)
    with serve_state(state) as url:
        yield SGLangBackend(url, tokenizer=backend.tokenizer), state


def bodies(state: FakeSGLangState, route: str = "/generate") -> list[dict]:
    return [body for path, body in state.requests if path == route]


def test_sglang_generate_matches_hf_and_sends_sglang_request(sglang, backend, prompts):
    remote, state = sglang
    assert isinstance(remote, PolicyBackend)
    params = SamplingParams(temperature=0.0, max_new_tokens=9, stop=("</answer>",))
    out = remote.generate(prompts, params, n=2)
    expected = backend.generate(prompts, params, n=2)
    assert [[g.token_ids for g in grp] for grp in out] == [[g.token_ids for g in grp] for grp in expected]
    assert [[g.text for g in grp] for grp in out] == [[g.text for g in grp] for grp in expected]
    assert [[g.finish_reason for g in grp] for grp in out] == [[g.finish_reason for g in grp] for grp in expected]
    assert out[1][1].logprobs == pytest.approx(expected[1][1].logprobs)
    body = bodies(state)[-1]
    assert body["input_ids"] == prompts
    assert body["sampling_params"] == {"temperature": 0.0, "top_p": 1.0, "max_new_tokens": 9, "n": 2,
                                       "stop": ["</answer>"], "no_stop_trim": True}


def test_sglang_score_reads_input_token_logprobs(sglang, backend, prompts):
    remote, state = sglang
    responses = [[5, 6, 7], [], [9], [10, 11]]
    scores = remote.score(prompts, responses)
    expected = backend.score(prompts, responses)
    assert scores[1] == [] and [len(s) for s in scores] == [3, 0, 1, 2]
    for got, want in zip(scores, expected):
        assert got == pytest.approx(want, abs=1e-6)
    body = bodies(state)[-1]
    assert body["logprob_start_len"] == [len(prompts[i]) - 1 for i in (0, 2, 3)]
    assert body["sampling_params"]["max_new_tokens"] == 0


def test_sglang_seeded_sampling_sends_one_seed_per_sample_and_matches_hf(sglang, backend, prompts):
    remote, state = sglang
    remote.send_seed = True
    params = SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=8, seed=41)
    out = remote.generate(prompts[:2], params, n=3)
    expected = backend.generate(prompts[:2], params, n=3)
    assert [[g.token_ids for g in grp] for grp in out] == [[g.token_ids for g in grp] for grp in expected]
    assert [[g.logprobs for g in grp] for grp in out] == [[g.logprobs for g in grp] for grp in expected]
    body = bodies(state)[-1]
    assert body["input_ids"] == [prompts[0]] * 3 + [prompts[1]] * 3  # n expanded, prompt-major
    seeds = [sp["sampling_seed"] for sp in body["sampling_params"]]
    assert seeds[0] == 41 and len(set(seeds)) == 6  # identical prompts never share a seed
    assert {sp["n"] for sp in body["sampling_params"]} == {1}
    assert remote.generate(prompts[:2], params, n=3)[1][2].token_ids == out[1][2].token_ids
    other = remote.generate(prompts[:2], SamplingParams(temperature=1.0, top_p=0.9, max_new_tokens=8, seed=42), n=3)
    assert [[g.token_ids for g in grp] for grp in other] != [[g.token_ids for g in grp] for grp in out]


def test_sglang_rejects_malformed_answers(backend, prompts):
    app = FastAPI()
    calls: list[dict] = []

    @app.post("/generate")
    def generate(body: dict) -> list[dict]:
        calls.append(body)
        return [{"text": "x", "meta_info": {"finish_reason": {"type": "stop"}}}]

    remote = SGLangBackend("http://testserver", tokenizer=backend.tokenizer, client=TestClient(app))
    with pytest.raises(SGLangError, match="output_token_logprobs"):
        remote.generate(prompts[:1], GREEDY)
    with pytest.raises(SGLangError, match="expected 2 outputs"):
        remote.generate(prompts[:2], GREEDY)
    assert len(calls) == 2  # a malformed answer is not retried
