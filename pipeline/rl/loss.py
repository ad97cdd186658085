"""PPO clipped surrogate (docs/method.md §6) via verl's `vanilla` policy loss, and the minibatch split."""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

import numpy as np
import torch
from verl.trainer.ppo.core_algos import agg_loss, compute_policy_loss_vanilla
from verl.workers.config import ActorConfig

from pipeline.errors import InputError

LOSS_AGG_MODE = "token-mean"


@lru_cache(maxsize=16)
def actor_config(clip_ratio: float, clip_ratio_c: float) -> ActorConfig:
    """The verl ActorConfig that `compute_policy_loss_vanilla` reads (symmetric clip, dual clip c)."""
    return ActorConfig(
        strategy="fsdp",
        rollout_n=1,
        ppo_micro_batch_size_per_gpu=1,
        clip_ratio=clip_ratio,
        clip_ratio_low=clip_ratio,
        clip_ratio_high=clip_ratio,
        clip_ratio_c=clip_ratio_c,
        loss_agg_mode=LOSS_AGG_MODE,
    )


def policy_loss(
    new_logp: torch.Tensor,
    old_logp: torch.Tensor,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    entropy: torch.Tensor,
    *,
    clip_ratio: float,
    clip_ratio_c: float,
    entropy_coef: float,
) -> tuple[torch.Tensor, dict[str, float]]:
    """loss = token-mean clipped PPO surrogate - entropy_coef * token-mean entropy, over loss tokens.

    All tensors are (bs, L); `entropy` is the per-token policy entropy. The token mean runs over
    this minibatch's loss tokens. Metrics: pg_loss, pg_clipfrac, pg_clipfrac_lower, ppo_kl
    (approximate KL old->new, mean of old - new), entropy.
    """
    if loss_mask.sum() == 0:
        raise InputError("loss_mask: the minibatch has no loss token")
    mask = loss_mask.to(new_logp.dtype)
    pg_loss, verl_metrics = compute_policy_loss_vanilla(
        old_log_prob=old_logp,
        log_prob=new_logp,
        advantages=advantages,
        response_mask=mask,
        loss_agg_mode=LOSS_AGG_MODE,
        config=actor_config(clip_ratio, clip_ratio_c),
    )
    mean_entropy = agg_loss(loss_mat=entropy, loss_mask=mask, loss_agg_mode=LOSS_AGG_MODE)
    loss = pg_loss - entropy_coef * mean_entropy
    metrics = {
        "pg_loss": pg_loss.detach().item(),
        "pg_clipfrac": verl_metrics["actor/pg_clipfrac"],
        "pg_clipfrac_lower": verl_metrics["actor/pg_clipfrac_lower"],
        "ppo_kl": verl_metrics["actor/ppo_kl"],
        "entropy": mean_entropy.detach().item(),
    }
    return loss, metrics


def minibatches(n_samples: int, n_minibatches: int, seed: int) -> list[np.ndarray]:
    """Shuffle sample indices 0..n_samples-1 with `seed` and split them into `n_minibatches`
    near-equal parts (one optimizer update each, one pass over the rollout batch)."""
    if n_minibatches < 1 or n_samples < n_minibatches:
        raise InputError(f"n_samples: expected at least n_minibatches={n_minibatches} samples, got {n_samples}")
    order = np.random.default_rng(seed).permutation(n_samples)
    return [part for part in np.array_split(order, n_minibatches)]


def length_buckets(prompt_lengths: Sequence[int], response_lengths: Sequence[int],
                   token_budget: int) -> list[list[int]]:
    """Split one minibatch into micro-batches of similar length for gradient accumulation.

    Samples are sorted longest first and packed while the padded block (rows x (widest prompt +
    widest response)) stays within `token_budget`; a sample longer than the budget gets a
    micro-batch of its own. Only the padding changes: `policy_loss` weighted by each
    micro-batch's share of the loss tokens sums to the minibatch's token mean (verl's micro-batch
    loop does the same)."""
    if len(prompt_lengths) != len(response_lengths):
        raise InputError(f"response_lengths: expected {len(prompt_lengths)} lengths, got {len(response_lengths)}")
    order = sorted(range(len(prompt_lengths)), key=lambda i: (-(prompt_lengths[i] + response_lengths[i]), i))
    buckets: list[list[int]] = []
    width_p = width_r = 0
    for i in order:
        wp, wr = max(width_p, prompt_lengths[i]), max(width_r, response_lengths[i])
        if buckets and (len(buckets[-1]) + 1) * (wp + wr) <= token_budget:
            buckets[-1].append(i)
            width_p, width_r = wp, wr
        else:
            buckets.append([i])
            width_p, width_r = prompt_lengths[i], response_lengths[i]
    return buckets
