"""PPO clipped surrogate (verl vanilla, dual clip) and the minibatch split, on hand cases."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from pipeline.errors import InputError
from pipeline.rl.loss import minibatches, policy_loss
from tests.helpers.configs import OPTIM

CLIP = dict(clip_ratio=OPTIM.clip_ratio, clip_ratio_c=OPTIM.clip_ratio_c)  # 0.2 and 3 (docs/method.md §6)

# per token: (ratio new/old, advantage); clip 0.2, dual clip c = 3
CASES = [
    (1.1, 2.0),   # inside the clip: -A * r = -2.2
    (1.5, 1.0),   # above 1.2 with A > 0: clipped to -1.2
    (0.5, -1.0),  # below 0.8 with A < 0: max(0.5, 0.8) = 0.8
    (5.0, -1.0),  # A < 0, huge ratio: max(5, 1.2) = 5, dual clip min(5, 3) = 3
]


def hand_token_loss(ratio: float, adv: float, clip: float = 0.2, c: float = 3.0) -> float:
    unclipped = -adv * ratio
    clipped = max(unclipped, -adv * min(max(ratio, 1 - clip), 1 + clip))
    return min(clipped, -adv * c) if adv < 0 else clipped


def batch(extra_masked: bool = True):
    old = torch.tensor([[-1.0, -2.0, -0.5, -3.0, -1.0]], dtype=torch.float64)
    ratios = [r for r, _ in CASES] + [100.0]
    new = old + torch.log(torch.tensor([ratios], dtype=torch.float64))
    adv = torch.tensor([[a for _, a in CASES] + [50.0]], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1, 1, 0 if extra_masked else 1]])
    entropy = torch.tensor([[0.2, 0.4, 0.6, 0.8, 99.0]], dtype=torch.float64)
    return new, old, adv, mask, entropy


def test_ppo_loss_on_a_hand_case_with_clipping_and_dual_clip():
    new, old, adv, mask, entropy = batch()
    loss, metrics = policy_loss(new, old, adv, mask, entropy, entropy_coef=0.01, **CLIP)
    per_token = [hand_token_loss(r, a) for r, a in CASES]
    assert per_token == pytest.approx([-2.2, -1.2, 0.8, 3.0])
    pg = sum(per_token) / 4  # token mean over loss tokens only: the masked 5th token is ignored
    mean_entropy = (0.2 + 0.4 + 0.6 + 0.8) / 4
    assert metrics["pg_loss"] == pytest.approx(pg)
    assert loss.item() == pytest.approx(pg - 0.01 * mean_entropy)
    assert metrics["entropy"] == pytest.approx(mean_entropy)
    assert metrics["pg_clipfrac"] == pytest.approx(2 / 4)  # tokens 2 and 3 hit the 0.2 clip
    assert metrics["pg_clipfrac_lower"] == pytest.approx(1 / 4)  # token 4 hits the dual clip
    assert metrics["ppo_kl"] == pytest.approx(-sum(math.log(r) for r, _ in CASES) / 4)


def test_loss_has_gradient_only_where_the_ratio_is_not_clipped():
    new, old, adv, mask, entropy = batch()
    new = new.clone().requires_grad_(True)
    loss, _ = policy_loss(new, old, adv, mask, entropy, entropy_coef=0.0, **CLIP)
    loss.backward()
    # d/dlogp of -A * exp(logp - old) / 4 = -A * r / 4 on the unclipped token; clipped tokens: 0
    assert new.grad[0].tolist() == pytest.approx([-2.0 * 1.1 / 4, 0.0, 0.0, 0.0, 0.0])


def test_wider_clip_changes_the_answer():
    new, old, adv, mask, entropy = batch()
    _, metrics = policy_loss(new, old, adv, mask, entropy, entropy_coef=0.0, clip_ratio=0.6,
                             clip_ratio_c=OPTIM.clip_ratio_c)
    per_token = [hand_token_loss(r, a, clip=0.6) for r, a in CASES]
    assert metrics["pg_loss"] == pytest.approx(sum(per_token) / 4)


def test_zero_advantage_gives_zero_policy_loss_and_empty_mask_raises():
    new, old, adv, mask, entropy = batch()
    _, metrics = policy_loss(new, old, torch.zeros_like(adv), mask, entropy, entropy_coef=0.0, **CLIP)
    assert metrics["pg_loss"] == 0.0
    with pytest.raises(InputError, match="loss_mask"):
        policy_loss(new, old, adv, torch.zeros_like(mask), entropy, entropy_coef=0.0, **CLIP)


def test_minibatches_partition_the_batch_in_five():
    parts = minibatches(23, OPTIM.n_minibatches, seed=7)
    assert len(parts) == 5
    joined = np.concatenate(parts)
    assert sorted(joined.tolist()) == list(range(23))
    assert {len(p) for p in parts} == {4, 5}
    assert all(np.array_equal(a, b) for a, b in zip(parts, minibatches(23, OPTIM.n_minibatches, seed=7)))
    assert not all(np.array_equal(a, b) for a, b in zip(parts, minibatches(23, OPTIM.n_minibatches, seed=8)))
    with pytest.raises(InputError, match="n_samples"):
        minibatches(3, OPTIM.n_minibatches, seed=0)
