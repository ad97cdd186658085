"""The decode-ready KV cache: HFBackend's prefill writes each prompt's keys and values straight
into its rows (left-padded with zeros), and finished rows leave in place."""

from __future__ import annotations

import pytest
import torch
from transformers import DynamicCache

from pipeline.policy.kv_cache import PreallocatedLayer
from tests.helpers.tiny_models import tiny_hf_backend


@pytest.fixture(scope="module")
def backend():
    # max_batch_tokens=40: the prompts below fall into several prefill sub-batches
    return tiny_hf_backend(num_kv_heads=2, max_positions=128, max_batch_tokens=40)


def layer(rows: int, length: int, capacity: int) -> PreallocatedLayer:
    keys = torch.arange(rows * 2 * length * 3, dtype=torch.float32).reshape(rows, 2, length, 3)
    return PreallocatedLayer.copy_of(keys, -keys, capacity)


def test_ascending_rows_are_kept_in_place():
    cache = layer(rows=6, length=4, capacity=7)
    expected = cache.keys[[1, 2, 5]].clone()
    storage = cache._keys.untyped_storage().data_ptr()
    cache.batch_select_indices(torch.tensor([1, 2, 5]))
    assert torch.equal(cache.keys, expected) and torch.equal(cache.values, -expected)
    assert cache._keys.untyped_storage().data_ptr() == storage  # no second cache
    keys, _ = cache.update(torch.ones(3, 2, 1, 3), torch.ones(3, 2, 1, 3))
    assert keys.shape == (3, 2, 5, 3) and torch.equal(keys[:, :, :4], expected)
    assert torch.equal(keys[:, :, 4], torch.ones(3, 2, 3))


def test_other_orders_are_gathered():
    cache = layer(rows=4, length=2, capacity=3)
    expected = cache.keys[[3, 0]].clone()
    cache.batch_select_indices(torch.tensor([3, 0]))
    assert torch.equal(cache.keys, expected) and torch.equal(cache.values, -expected)


def test_buffers_must_hold_the_filled_positions():
    with pytest.raises(ValueError, match="cannot hold"):
        PreallocatedLayer(torch.zeros(1, 1, 2, 3), torch.zeros(1, 1, 2, 3), length=3)
    with pytest.raises(ValueError, match="capacity"):
        PreallocatedLayer.copy_of(torch.zeros(1, 1, 4, 3), torch.zeros(1, 1, 4, 3), capacity=3)


def test_prefill_writes_every_row_of_every_sub_batch(backend):
    texts = ["kalo", "mira tuso nevi kalo mira so", "vi", "kalo", "tu ne so vi ka lo mi ra tu ne so vi ka lo"]
    rows = [backend.encode_prompt(t) for t in texts]  # "kalo" twice: one prefill, two rows
    width = max(map(len, rows))
    with torch.inference_mode():
        cache, logits, mask, position = backend._prefill(rows, max_new_tokens=5)
        for row, prompt in enumerate(rows):
            alone = DynamicCache(config=backend.model.config)
            out = backend.model(input_ids=torch.tensor([prompt]), past_key_values=alone, use_cache=True)
            left = width - len(prompt)
            assert mask[row].tolist() == [0] * left + [1] * len(prompt)
            assert position[row].item() == len(prompt) - 1
            assert torch.allclose(logits[row], out.logits[0, -1], atol=1e-5)
            for ours, reference in zip(cache.layers, alone.layers):
                assert ours._keys.shape[2] == width + 5  # room for the new tokens
                assert ours.keys.shape[2] == width
                assert torch.count_nonzero(ours.keys[row, :, :left]) == 0
                assert torch.allclose(ours.keys[row, :, left:], reference.keys[0], atol=1e-5)
                assert torch.allclose(ours.values[row, :, left:], reference.values[0], atol=1e-5)
