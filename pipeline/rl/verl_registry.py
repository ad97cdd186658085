"""The Stage-II advantage as a verl estimator: `get_adv_estimator_fn("multiagent_opd")`.

verl's own `compute_advantage` passes only token_level_rewards, response_mask, index and
config to custom estimators; our trainer calls the registered function directly with the
extra keyword arguments below (`estimator_inputs` builds them from the tables).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import torch
from verl.trainer.ppo.core_algos import register_adv_est

from pipeline.io import InputError
from pipeline.rl.advantages import GRPO_EPSILON, OPD_BETA, check_pure_groups, grpo_scalar_advantage, group_keys, opd_advantage
from pipeline.rl.batch import last_token_rewards, pad_column
from pipeline.rl.checks import require_unique
from pipeline.rl.modes import ROLE_IDS, ROLE_POLICY, ROLES, check_mode

ESTIMATOR_NAME = "multiagent_opd"
_UNIT_COLUMN = {"trajectory": "trajectory_id", "sample": "sample_id"}


def _grpo_rows(
    scores: torch.Tensor, group: np.ndarray, unit: np.ndarray, epsilon: float
) -> torch.Tensor:
    """Per-row advantage: one GRPO value per unit (rows of a unit must share score and group)."""
    first: dict[Any, int] = {}
    for i, u in enumerate(unit):
        j = first.setdefault(u, i)
        if group[j] != group[i] or scores[j].item() != scores[i].item():
            raise InputError(f"token_level_rewards: rows of unit {u!r} must share one reward and one group")
    heads = np.fromiter(first.values(), dtype=np.int64, count=len(first))
    unit_adv = grpo_scalar_advantage(scores[heads].numpy(), group[heads], epsilon)
    position = {u: k for k, u in enumerate(first)}
    return torch.as_tensor(unit_adv[[position[u] for u in unit]])


@register_adv_est(ESTIMATOR_NAME)
def compute_multiagent_opd_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray,
    config: Any = None,
    *,
    role_ids: np.ndarray | torch.Tensor,
    unit_index: np.ndarray,
    old_log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor | None = None,
    mode: str = "opd",
    beta: float = OPD_BETA,
    epsilon: float = GRPO_EPSILON,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Role-scoped advantages from tensors: GRPO per group `index` (one reward per `unit_index`)
    for GRPO roles, beta * mask * (teacher - old) for OPD roles, 0 for untrained roles.

    Shapes (bs, L) for the tensors, (bs,) for index, unit_index and role_ids (pipeline.rl.modes.ROLE_IDS).
    Returns (advantages, returns), both the advantages, like verl's GRPO. Not available for
    outcome_rl_searcher, whose Searcher baseline counts trajectories without Searcher rows.
    """
    check_mode(mode)
    if mode == "outcome_rl_searcher":
        raise InputError("mode: outcome_rl_searcher needs every trajectory's R_EM; use compute_advantages")
    roles = np.array([ROLES[int(r)] for r in np.asarray(role_ids)], dtype=object)
    index = np.asarray(index, dtype=object)
    unit_index = np.asarray(unit_index, dtype=object)
    check_pure_groups(index, roles, np.array([str(k).split("|")[1] for k in index], dtype=object))
    mask = response_mask.to(torch.float64)
    scores = token_level_rewards.to(torch.float64).sum(dim=-1)
    advantages = torch.zeros_like(mask)
    for role, policy in ROLE_POLICY[mode].items():
        rows = torch.as_tensor(roles == role)
        if not rows.any() or policy.kind == "none":
            continue
        if policy.kind == "opd":
            if teacher_log_probs is None:
                raise InputError("teacher_log_probs: required for OPD roles")
            advantages[rows] = opd_advantage(
                teacher_log_probs[rows].to(torch.float64), old_log_probs[rows].to(torch.float64), mask[rows], beta
            )
        else:
            per_row = _grpo_rows(scores[rows], index[rows.numpy()], unit_index[rows.numpy()], epsilon)
            advantages[rows] = torch.where(mask[rows] > 0, per_row.unsqueeze(-1), torch.zeros_like(mask[rows]))
    advantages = advantages.to(token_level_rewards.dtype)
    return advantages, advantages


def estimator_inputs(samples: pd.DataFrame, tokens: pd.DataFrame, mode: str) -> dict[str, Any]:
    """Keyword arguments for the registered estimator, rows in `samples` order.

    Uses samples.reward (from compute_rewards) and the tokens' loss_mask, old_logp, teacher_logp.
    response_mask is 0 on the rows of untrained roles, as compute_advantages sets loss_mask.
    """
    check_mode(mode)
    require_unique(samples, "sample_id", "samples")
    ids = samples["sample_id"].to_numpy(dtype=object)
    policies = ROLE_POLICY[mode]
    index = np.empty(len(samples), dtype=object)
    unit = np.empty(len(samples), dtype=object)
    for role, policy in policies.items():
        on = (samples["role"] == role).to_numpy()
        if policy.kind == "grpo" and on.any():
            index[on] = group_keys(samples[on], policy.scope).to_numpy(dtype=object)
            unit[on] = samples.loc[on, _UNIT_COLUMN[policy.unit]].astype(str).to_numpy(dtype=object)
        else:
            index[on] = (samples.loc[on, "role"] + "|" + samples.loc[on, "workflow"] + "|" + samples.loc[on, "sample_id"]).to_numpy(dtype=object)
            unit[on] = ids[on]
    mask = pad_column(tokens, ids, "loss_mask")
    untrained = [role for role, p in policies.items() if p.kind == "none"]
    mask[torch.tensor(samples["role"].isin(untrained).to_numpy())] = 0.0
    return {
        "token_level_rewards": last_token_rewards(tokens, ids, samples["reward"].to_numpy(dtype=np.float64)),
        "response_mask": mask,
        "index": index,
        "role_ids": np.array([ROLE_IDS[r] for r in samples["role"]], dtype=np.int64),
        "unit_index": unit,
        "old_log_probs": pad_column(tokens, ids, "old_logp"),
        "teacher_log_probs": pad_column(tokens, ids, "teacher_logp", fill=float("nan")),
        "mode": mode,
    }
