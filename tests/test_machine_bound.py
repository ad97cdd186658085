"""The benchmarks' FLOP count (benchmarks/machine_bound.py) against torch's own flop counter."""

from __future__ import annotations

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.machine_bound import describe, forward_flops_per_token, sequence_flops
from tests.helpers.tiny_models import tiny_hf_backend


@pytest.fixture(scope="module")
def model() -> torch.nn.Module:
    return tiny_hf_backend(num_kv_heads=2, max_positions=256).model


def test_linear_flops_match_torchs_counter(model):
    """Every matrix product of a forward pass (projections, MLP, the tied output layer) is counted:
    torch counts the same aten.mm FLOP. Attention is left out of both (torch's counter does not
    count the CPU attention kernel), so only the context-free part is compared."""
    length = 40
    with FlopCounterMode(display=False) as counter, torch.no_grad():
        model(input_ids=torch.randint(5, 300, (1, length)))
    counted = counter.get_flop_counts()["Global"][torch.ops.aten.mm]
    assert forward_flops_per_token(model, context=0) * length == counted


def test_attention_flops_grow_with_context(model):
    config = model.config
    per_position = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim
    assert forward_flops_per_token(model, 10) - forward_flops_per_token(model, 0) == pytest.approx(10 * per_position)
    # a prompt of 8 then 4 new tokens: the prompt attends to 4 positions on average, the new ones to 10
    expected = 8 * forward_flops_per_token(model, 4) + 4 * forward_flops_per_token(model, 10)
    assert sequence_flops(model, [8], [4]) == pytest.approx(expected)


def test_describe_reports_the_share_of_the_bound():
    line = describe("x", seconds=2.0, tokens=100, flops=4e9, bounds={"float32": 20e9})
    assert "50 tok/s" in line and "2.00 GFLOP/s" in line and "10.0% of the float32" in line
