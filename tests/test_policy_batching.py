"""Grouped generation: prompts that start alike prefilled as one shared prefix plus their
suffixes, and each row stopped at its own token budget, against the plain generate call on the
same seeded rows."""

from __future__ import annotations

import random

import pytest
import torch

from pipeline.policy.base import SamplingParams
from pipeline.policy.batching import shared_prefix_groups
from tests.helpers.tiny_models import tiny_hf_backend


@pytest.fixture(scope="module")
def backend():
    return tiny_hf_backend(num_kv_heads=4, max_positions=512, max_batch_size=16)


def test_rows_stop_at_their_own_budget(backend):
    backend.eos_ids, eos = set(), backend.eos_ids  # never stop early: every row runs to its budget
    try:
        prompts = [[5, 6, 7], [8, 9], [10, 11, 12, 13]]
        params = SamplingParams(temperature=1.0, max_new_tokens=9, row_seeds=(1, 2, 3), row_max_new_tokens=(3, 9, 20))
        out = backend.generate(prompts, params, n=2)
        assert [[len(g.token_ids) for g in row] for row in out] == [[3, 3], [9, 9], [9, 9]]
        assert {g.finish_reason for row in out for g in row} == {"length"}
        full = backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=9, row_seeds=(1, 2, 3)), n=2)
        assert out[0][0].token_ids == full[0][0].token_ids[:3]  # the budget cuts, it does not redraw
        with pytest.raises(Exception, match="row_max_new_tokens"):
            backend.generate(prompts, SamplingParams(max_new_tokens=4, row_max_new_tokens=(1, 2)))
    finally:
        backend.eos_ids = eos


def test_prompts_that_start_alike_share_one_prefix():
    header = list(range(100, 130))  # 30 tokens, as a role's instructions
    prompts = [header + [1, 2, 3], header + [1, 2, 4, 5], header + [7], list(range(200, 240)), [9, 9]]
    groups = shared_prefix_groups(prompts, min_shared=16)
    assert sorted((shared, sorted(members)) for shared, members in groups) == [(0, [3, 4]), (30, [0, 1, 2])]
    for shared, members in groups:
        assert all(len(prompts[i]) > shared for i in members)  # every suffix holds a token
        assert len({tuple(prompts[i][:shared]) for i in members}) == 1


def test_a_prompt_that_is_anothers_prefix_keeps_a_suffix():
    base = list(range(50))
    groups = shared_prefix_groups([base, base + [7, 8]], min_shared=16)
    assert groups == [(49, [0, 1])]


def test_prefilling_after_a_shared_prefix_gives_the_same_next_token_distribution(backend):
    rng = random.Random(9)
    header = [rng.randrange(3, 300) for _ in range(40)]
    prompts = [header + [rng.randrange(3, 300) for _ in range(rng.choice([1, 5, 60]))] for _ in range(12)]
    prompts += [[rng.randrange(3, 300) for _ in range(30)] for _ in range(3)]
    with backend._inference():
        _, plain, plain_mask, plain_pos = backend._prefill(prompts, 4)
        _, shared, shared_mask, shared_pos = backend._prefill(prompts, 4, shared_prefixes=True)
    assert torch.allclose(plain.log_softmax(-1), shared.log_softmax(-1), atol=1e-4)
    assert torch.equal(plain_pos, shared_pos) and torch.equal(plain_mask.sum(1), shared_mask.sum(1))
    out = backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=8, row_seeds=tuple(range(15)),
                                                   shared_prefixes=True))
    ref = backend.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens=8, row_seeds=tuple(range(15))))
    assert sum(a[0].token_ids == b[0].token_ids for a, b in zip(out, ref)) >= 13


def test_the_switch_and_the_engine_separate_stored_stage2_starts(monkeypatch):
    """stage2_start's stored fingerprint changes with the switch and with the engine's settings (a
    start sampled one way is not read by a run of the other)."""
    import dataclasses
    from pathlib import Path

    from pipeline.config import load_params
    from pipeline.rl.train_params import dev_settings
    from pipeline.stages import stage2_start

    monkeypatch.setattr(stage2_start, "inputs_fingerprint", lambda dirs, extra: "weights")
    dev = dev_settings(load_params(Path(__file__).resolve().parents[1] / "params.yaml", "tiny"))
    assert not dev.dev_rollout.grouped_generation and "grouped" not in repr(dev)
    on = dataclasses.replace(dev, dev_rollout=dataclasses.replace(dev.dev_rollout, grouped_generation=True))
    off_print = stage2_start.start_fingerprint(Path("."), dev, ["q1"], "engine")
    assert off_print == f"weights-{dev!r}-engine"
    assert stage2_start.start_fingerprint(Path("."), on, ["q1"], "engine") != off_print
    assert stage2_start.start_fingerprint(Path("."), dev, ["q1"], "engine-bf16") != off_print
