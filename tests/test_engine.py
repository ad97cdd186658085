"""The generation engine (pipeline.engine) against the transformers reference backend: the same
tokens from the same draws, the same log-probs (float32: within 1e-4 per token), the same
teacher-forced scores and training log-probs and gradients; continuous batching, per-row
budgets, stop strings, the prefix cache and determinism."""

from __future__ import annotations

import random

import pytest
import torch

from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.engine.backend import EngineBackend
from pipeline.engine.base import EngineConfig
from pipeline.engine.packed import group_by_prompt, packed_logprobs, token_budget_parts
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.engine.qwen3 import Qwen3Weights
from pipeline.errors import InputError
from pipeline.policy.base import SamplingParams
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.logprobs import pack_prompt_response, response_logprobs

TOLERANCE = 1e-4  # float32 log-prob agreement per token


@pytest.fixture(scope="module")
def tokenizer():
    rng = random.Random(0)
    syllables = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi"]
    texts = [" ".join(rng.choice(syllables) + rng.choice(syllables) for _ in range(10)) + "." for _ in range(200)]
    return train_bpe_tokenizer(texts, vocab_size=400)


def random_model(tokenizer, kv_heads: int = 2, seed: int = 0):
    model = build_tiny_qwen3(tokenizer, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=kv_heads,
                             intermediate_size=96, max_position_embeddings=256, seed=seed)
    torch.manual_seed(seed)
    with torch.no_grad():  # larger weights than the initialisation's, so samples vary
        for param in model.parameters():
            if param.ndim == 2:
                param.normal_(0.0, 0.15)
    return model


@pytest.fixture(scope="module")
def model(tokenizer):
    return random_model(tokenizer)


@pytest.fixture(scope="module")
def prompts(tokenizer):
    rng = random.Random(1)
    backend = HFBackend(random_model(tokenizer), tokenizer)
    words = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi", "<search>", "</search>"]
    out = [backend.encode_prompt(" ".join(rng.choice(words) for _ in range(rng.randint(1, 40)))) for _ in range(40)]
    return out + out[:6]  # repeated prompts: the prefix cache serves them


def seeded(n: int, **kw) -> SamplingParams:
    return SamplingParams(**{"temperature": 1.0, "max_new_tokens": 20, "stop": ("</search>",),
                             "row_seeds": tuple(range(100, 100 + n)), **kw})


def engine(model, tokenizer, **config) -> EngineBackend:
    return EngineBackend(model, tokenizer, config=EngineConfig(**config))


def test_same_tokens_and_logprobs_as_the_reference(model, tokenizer, prompts):
    params = seeded(len(prompts))
    reference = [g[0] for g in HFBackend(model, tokenizer).generate(prompts, params)]
    # few rows and a small prefill budget: rows are admitted as others finish (continuous batching)
    ours = [g[0] for g in engine(model, tokenizer, max_rows=7, prefill_tokens=64).generate(prompts, params)]
    same = [r.token_ids == o.token_ids for r, o in zip(reference, ours)]
    assert sum(same) >= 0.9 * len(prompts), same  # a last-bit difference may flip a near-tie draw
    for r, o, s in zip(reference, ours, same):
        if s:
            assert r.finish_reason == o.finish_reason and r.text == o.text
            assert max(abs(a - b) for a, b in zip(r.logprobs, o.logprobs)) < TOLERANCE


def test_sampled_logprobs_are_the_models(model, tokenizer, prompts):
    """What the engine records as log pi_old is the model's teacher-forced log-prob of the token."""
    gens = [g[0] for g in engine(model, tokenizer, max_rows=5).generate(prompts, seeded(len(prompts)))]
    scores = HFBackend(model, tokenizer).score(prompts, [g.token_ids for g in gens])
    worst = max(abs(a - b) for g, s in zip(gens, scores) for a, b in zip(g.logprobs, s))
    assert worst < TOLERANCE


def test_repeatable_and_independent_of_batching(model, tokenizer, prompts):
    params = seeded(len(prompts))
    first = engine(model, tokenizer, max_rows=16).generate(prompts, params)
    again = engine(model, tokenizer, max_rows=16).generate(prompts, params)
    assert [g[0].token_ids for g in first] == [g[0].token_ids for g in again]
    assert [g[0].logprobs for g in first] == [g[0].logprobs for g in again]  # byte-identical
    wide = engine(model, tokenizer, max_rows=256, prefix_cache_tokens=0).generate(prompts, params)
    same = sum(a[0].token_ids == b[0].token_ids for a, b in zip(first, wide))
    assert same >= 0.9 * len(prompts)


def test_row_budgets_stops_and_greedy(model, tokenizer, prompts):
    budgets = tuple(1 + i % 9 for i in range(len(prompts)))
    gens = engine(model, tokenizer, max_rows=8).generate(prompts, seeded(len(prompts), row_max_new_tokens=budgets))
    for (g,), budget in zip(gens, budgets):
        assert len(g.token_ids) <= budget
        assert g.finish_reason == ("stop" if "</search>" in g.text or len(g.token_ids) < budget else "length")
        assert "</search>" not in tokenizer.decode(g.token_ids[:-1])  # generation stops at the first one
    greedy = SamplingParams(temperature=0.0, max_new_tokens=12)
    ours = engine(model, tokenizer).generate(prompts[:10], greedy, n=2)
    reference = HFBackend(model, tokenizer).generate(prompts[:10], greedy, n=2)
    assert [[g.token_ids for g in row] for row in ours] == [[g.token_ids for g in row] for row in reference]


def test_rejects_bad_requests(model, tokenizer, prompts):
    backend = engine(model, tokenizer)
    with pytest.raises(InputError, match="max_new_tokens"):
        backend.generate(prompts[:1], SamplingParams(max_new_tokens=256))
    with pytest.raises(InputError, match="row_max_new_tokens"):
        backend.generate(prompts[:2], SamplingParams(row_max_new_tokens=(1,)))
    with pytest.raises(InputError, match="prompts\\[0\\]"):
        backend.score([[]], [[1]])


def test_a_long_prompt_is_cut_to_fit_with_a_warning(model, tokenizer, prompts):
    """Engine.submit cuts a prompt to the positions its budget leaves (256 - 10 here), for generate
    and the rollout driver alike."""
    long = [t for p in prompts for t in p][:300]
    params = seeded(1, max_new_tokens=10)
    with pytest.warns(UserWarning, match="truncated from the left"):
        cut = engine(model, tokenizer).generate([long], params)
    assert cut == engine(model, tokenizer).generate([long[-246:]], params)


def test_grouped_query_attention(tokenizer, prompts):
    """One key/value head shared by four query heads (the ci profile's shape)."""
    gqa = random_model(tokenizer, kv_heads=1, seed=3)
    params = seeded(len(prompts))
    gens = [g[0] for g in engine(gqa, tokenizer, max_rows=6).generate(prompts, params)]
    scores = HFBackend(gqa, tokenizer).score(prompts, [g.token_ids for g in gens])
    assert max(abs(a - b) for g, s in zip(gens, scores) for a, b in zip(g.logprobs, s)) < TOLERANCE


def test_score_matches_the_reference_and_uses_the_cache(model, tokenizer, prompts):
    rng = random.Random(2)
    pairs = [(p, [rng.randrange(3, 400) for _ in range(rng.randint(1, 15))]) for p in prompts for _ in range(2)]
    reference = HFBackend(model, tokenizer).score([p for p, _ in pairs], [r for _, r in pairs], temperature=0.7)
    backend = engine(model, tokenizer)
    ours = backend.score([p for p, _ in pairs], [r for _, r in pairs], temperature=0.7)
    assert max(abs(a - b) for x, y in zip(reference, ours) for a, b in zip(x, y)) < TOLERANCE
    stats = backend.engine.stats
    assert stats.scored_cached_tokens > 0.3 * stats.scored_tokens  # every prompt twice, some four times


def test_weights_update_clears_the_cache(model, tokenizer, prompts):
    trained = random_model(tokenizer, seed=5)
    backend = engine(trained, tokenizer)
    responses = [[5, 6, 7]] * len(prompts)
    backend.score(prompts, responses)
    with torch.no_grad():
        trained.model.layers[0].mlp.down_proj.weight.mul_(1.5)  # an optimizer step, in place
    ours = backend.score(prompts, responses)
    reference = HFBackend(trained, tokenizer).score(prompts, responses)
    assert max(abs(a - b) for x, y in zip(reference, ours) for a, b in zip(x, y)) < TOLERANCE


def test_packed_training_pass_matches_the_padded_one(model, tokenizer):
    rng = random.Random(4)
    shared = [[rng.randrange(3, 400) for _ in range(rng.randint(5, 40))] for _ in range(6)]
    prompts, responses = [], []
    for prompt in shared:
        for _ in range(rng.choice([1, 3])):  # some prompts with several responses (Answerer candidates)
            prompts.append(prompt)
            responses.append([rng.randrange(3, 400) for _ in range(rng.randint(1, 12))])
    groups = group_by_prompt(prompts, responses)
    assert sum(len(g.members) > 1 for g in groups) >= 1
    order = [i for g in groups for i in g.members]
    batch = pack_prompt_response([prompts[i] for i in order], [responses[i] for i in order], 0)

    def reference():
        logp, entropy = response_logprobs(model, batch.input_ids, batch.attention_mask, batch.response_length,
                                          temperature=0.7, position_ids=batch.position_ids, compute_entropy=True)
        flat = [torch.cat([m[r, :len(responses[i])] for r, i in enumerate(order)]) for m in (logp, entropy)]
        return flat

    model.zero_grad()
    ref_logp, ref_entropy = reference()
    ref_logp.sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    logp, entropy = packed_logprobs(Qwen3Weights(model), groups, temperature=0.7)
    logp.sum().backward()
    assert (logp - ref_logp).abs().max() < TOLERANCE
    assert (entropy - ref_entropy).abs().max() < TOLERANCE and not entropy.requires_grad
    for ours, theirs in zip((p.grad for p in model.parameters()), ref_grads):
        assert (ours - theirs).abs().max() <= 1e-4 * theirs.abs().max()
    model.zero_grad()
    assert [len(part) for part in token_budget_parts(groups, 10**6)] == [len(groups)]
    assert all(sum(g.tokens for g in part) <= 40 or len(part) == 1 for part in token_budget_parts(groups, 40))


def test_prefix_cache_match_insert_split_evict():
    def kv(start, end):
        return torch.arange(start, end, dtype=torch.float32).view(1, 1, -1, 1).expand(2, 1, -1, 1)

    cache = PrefixCache(budget_tokens=12)
    cache.insert([1, 2, 3, 4, 5], kv)
    n, parts = cache.match([1, 2, 3, 9])
    assert n == 3 and cache.gather(parts)[0, 0, :, 0].tolist() == [0, 1, 2]
    cache.insert([1, 2, 7, 8], lambda a, b: kv(a, b) + 100)  # splits the first edge after [1, 2]
    n, parts = cache.match([1, 2, 7, 8, 9])
    assert n == 4 and cache.gather(parts)[0, 0, :, 0].tolist() == [0, 1, 102, 103]
    assert cache.match([1, 2, 3, 4, 5], limit=4)[0] == 4 and cache.tokens == 7
    cache.tick()
    cache.match([1, 2, 7])  # [1, 2, 7, 8] is now the most recently used
    cache.insert([5, 6, 7, 8, 9, 10], kv)  # 13 > 12 held: the least recently used leaf goes
    assert cache.match([1, 2, 3, 4, 5])[0] == 2 and cache.match([1, 2, 7, 8])[0] == 4
    assert cache.tokens <= 12
    off = PrefixCache(budget_tokens=0)
    off.insert([1, 2, 3], kv)
    assert off.match([1, 2, 3]) == (0, [])


def test_packed_ppo_update_matches_the_padded_one(tokenizer):
    """pipeline.rl.trainer.ppo_update on the engine backend (packed pass) and on the reference backend
    (padded pass), from equal weights on one rollout-shaped batch: the same weights after the update."""
    import copy

    import numpy as np
    import pandas as pd

    from pipeline.rl import trainer
    from tests.test_rl_trainer import tiny_config

    rng = np.random.default_rng(0)
    samples, tokens = [], []
    prompts = [rng.integers(3, 400, size=int(n)).tolist() for n in rng.integers(5, 60, size=12)]
    for i in range(30):
        sid = f"s{i}"
        samples.append({"sample_id": sid, "prompt_ids": prompts[i % len(prompts)]})  # shared prompts
        tokens += [{"sample_id": sid, "pos": p, "token_id": int(rng.integers(3, 400)), "loss_mask": int(p % 4 != 3),
                    "old_logp": float(-rng.uniform(0.5, 6.0)), "advantage": float(rng.normal())}
                   for p in range(int(rng.integers(1, 20)))]
    batch = trainer.Batch(pd.DataFrame(samples), pd.DataFrame(tokens), generated_tokens=len(tokens))
    cfg = tiny_config("multiagent_opd", entropy_coef=0.0)
    start = random_model(tokenizer, seed=7)
    out = {}
    for name, make in (("padded", HFBackend), ("packed", EngineBackend)):
        model = copy.deepcopy(start)
        backend = make(model, tokenizer)
        metrics = trainer.ppo_update(model, trainer.make_optimizer(model, cfg), backend, batch, cfg, seed=3)
        out[name] = (metrics, model.state_dict())
    (padded, padded_weights), (packed, packed_weights) = out["padded"], out["packed"]
    for key in ("pg_loss", "clip_fraction", "entropy", "grad_norm"):
        assert abs(padded[key] - packed[key]) <= 1e-4 * max(1.0, abs(padded[key])), key
    moved = max((padded_weights[k] - start.state_dict()[k]).abs().max().item() for k in padded_weights)
    apart = max((padded_weights[k] - packed_weights[k]).abs().max().item() for k in padded_weights)
    assert moved > 1e-4 and apart < 1e-3 * moved


def test_unwritten_pool_memory_never_leaks_into_attention(model, tokenizer, prompts, monkeypatch):
    """Prefill and decode read masked positions of shorter rows: they must hold finite numbers even
    when the pool's fresh memory holds NaN (torch.empty gives whatever was there)."""
    from pipeline.engine.kv_pool import KVPool

    fresh = KVPool._new_chunk
    monkeypatch.setattr(KVPool, "_new_chunk", lambda self: fresh(self).fill_(float("nan")))
    monkeypatch.setattr(KVPool, "CHUNK", 4)  # rows across several chunks, chunks dropped and made again
    params = seeded(len(prompts))
    backend = engine(model, tokenizer, max_rows=9)
    gens = [g[0] for g in backend.generate(prompts, params)]
    assert all(all(lp == lp for lp in g.logprobs) for g in gens)  # no NaN log-prob
    scores = HFBackend(model, tokenizer).score(prompts, [g.token_ids for g in gens])
    assert max(abs(a - b) for g, s in zip(gens, scores) for a, b in zip(g.logprobs, s)) < TOLERANCE


def test_prefix_cache_finds_the_longest_cached_prefix():
    """Against brute force over every inserted sequence, with keys and values that name their token."""
    rng = random.Random(8)
    cache = PrefixCache(budget_tokens=10**6)
    inserted: list[list[int]] = []
    for _ in range(300):
        ids = [rng.randrange(4) for _ in range(rng.randint(1, 14))]
        if inserted and rng.random() < 0.5:  # often extend or branch off an earlier sequence
            base = rng.choice(inserted)
            ids = base[: rng.randint(0, len(base))] + ids
        probe = [rng.randrange(4) for _ in range(rng.randint(1, 16))]
        n, parts = cache.match(probe)
        best = max((next((i for i, (a, b) in enumerate(zip(s, probe)) if a != b), min(len(s), len(probe)))
                    for s in inserted), default=0)
        assert n == best
        if n:
            assert cache.gather(parts)[0, 0, :, 0].tolist() == probe[:n]
        cache.insert(ids, lambda a, b, ids=ids: torch.tensor(ids[a:b], dtype=torch.float32).view(1, 1, -1, 1))
        inserted.append(ids)


def test_one_backend_scores_after_it_generated_and_generates_after_it_scored(model, tokenizer, prompts):
    """The prefix cache's storage is written in inference mode by both (generation and scoring
    share it): scoring prompts the generation did not cache, after it, inserts into that storage."""
    backend = engine(model, tokenizer)
    params = SamplingParams(temperature=1.0, max_new_tokens=6, seed=3)
    backend.generate(prompts[:4], params)
    others = [p + [7, 8, 9] for p in prompts[4:8]]
    responses = [[5, 6, 7, 8]] * len(others)
    scored = backend.score(others, responses)
    reference = HFBackend(model, tokenizer).score(others, responses)
    assert max(abs(a - b) for x, y in zip(reference, scored) for a, b in zip(x, y)) < TOLERANCE
    first = engine(model, tokenizer)
    first.score(others, responses)
    assert [g[0].token_ids for g in first.generate(prompts[:4], params)] == \
        [g[0].token_ids for g in engine(model, tokenizer).generate(prompts[:4], params)]
