"""Role-scoped advantages (SPEC 5.2-5.4) over the samples and tokens tables.

GRPO statistics come from verl's `compute_grpo_outcome_advantage`; Searcher OPD is the
token-level `beta * M_t * (teacher_logp - old_logp)`. `compute_advantages` is the table
path; `pipeline.rl.verl_registry` computes the same from tensors inside verl's registry.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage

from pipeline.io import InputError
from pipeline.rl.checks import require_columns, require_finite, require_roles, require_unique
from pipeline.rl.modes import ROLE_POLICY, RolePolicy, check_mode

OPD_BETA = 0.01
GRPO_EPSILON = 1e-6
_SCOPE_COLUMN = {"question": "question_id", "request": "request_id"}
_UNIT_COLUMN = {"trajectory": "trajectory_id", "sample": "sample_id"}


def group_keys(samples: pd.DataFrame, scope: str) -> pd.Series:
    """GRPO group key "role|workflow|scope id": groups never mix roles or workflows."""
    scope_id = samples[_SCOPE_COLUMN[scope]].astype(str)
    if (scope_id == "").any():
        raise InputError(f"samples.{_SCOPE_COLUMN[scope]}: expected a non-empty id for {scope}-scoped GRPO")
    return samples["role"].astype(str) + "|" + samples["workflow"].astype(str) + "|" + scope_id


def check_pure_groups(keys: np.ndarray, roles: np.ndarray, workflows: np.ndarray) -> None:
    """Raise InputError if one group key covers more than one role or workflow."""
    frame = pd.DataFrame({"key": keys, "role": roles, "workflow": workflows})
    counts = frame.groupby("key").agg(roles=("role", "nunique"), workflows=("workflow", "nunique"))
    impure = counts[(counts["roles"] > 1) | (counts["workflows"] > 1)]
    if len(impure):
        raise InputError(f"GRPO group {impure.index[0]!r} mixes roles or workflows")


def grpo_scalar_advantage(rewards: np.ndarray, index: np.ndarray, epsilon: float = GRPO_EPSILON) -> np.ndarray:
    """One advantage per unit: verl GRPO, (R - mean_g) / (std_g + eps), unbiased std.

    Runs verl in float64 (in float32 its group mean of equal rewards is off by ~1e-8, which the
    1e-6 epsilon blows up to advantages of ~0.05), and sets groups of identical rewards to exactly
    0. verl gives a singleton group mean 0 and std 1, i.e. the advantage R / (1 + eps), not 0.
    Each unit's reward sits on its only token: verl sums token rewards, so this equals the reward
    on the last loss token of a real response.
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    if len(rewards) == 0:
        return rewards
    index = np.asarray(index, dtype=object)
    token_level = torch.tensor(rewards).unsqueeze(-1)
    adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_level,
        response_mask=torch.ones_like(token_level),
        index=index,
        epsilon=epsilon,
    )
    adv = adv.squeeze(-1).numpy().copy()
    spread = pd.Series(rewards).groupby(index).agg(lambda r: r.max() - r.min())
    tied = pd.Series(index).map(spread).to_numpy(dtype=np.float64) == 0.0
    sizes = pd.Series(index).map(pd.Series(index).value_counts()).to_numpy()
    adv[tied & (sizes > 1)] = 0.0
    return adv


def opd_advantage(
    teacher_logp: torch.Tensor, old_logp: torch.Tensor, loss_mask: torch.Tensor, beta: float = OPD_BETA
) -> torch.Tensor:
    """Searcher OPD: A_t = beta * M_t * (teacher_logp - old_logp); exactly 0 where M_t = 0."""
    on = loss_mask > 0
    if torch.isnan(teacher_logp[on]).any():
        raise InputError("tokens.teacher_logp: expected Teacher log-probs on every Searcher loss token (OPD)")
    return torch.where(on, beta * (teacher_logp - old_logp), torch.zeros_like(old_logp))


def _unit_table(samples: pd.DataFrame, role: str, policy: RolePolicy) -> pd.DataFrame:
    """One row per GRPO unit: columns unit, group, reward (equal over the unit's samples)."""
    unit_col = _UNIT_COLUMN[policy.unit]
    if policy.reward_column == "reward":
        rows = samples[samples["role"] == role]
    else:  # every trajectory of the batch counts, with the role's name in the group key
        rows = samples.assign(role=role)
    rows = rows.assign(group=group_keys(rows, policy.scope), unit=rows[unit_col].astype(str))
    check_pure_groups(rows["group"].to_numpy(), rows["role"].to_numpy(), rows["workflow"].to_numpy())
    require_finite(rows[policy.reward_column], f"samples.{policy.reward_column}", f"{role} GRPO")
    units = rows.groupby("unit", sort=False).agg(
        group=("group", "first"),
        n_groups=("group", "nunique"),
        reward=(policy.reward_column, "first"),
        spread=(policy.reward_column, lambda r: r.max() - r.min()),
    )
    if (units["n_groups"] > 1).any() or (units["spread"] != 0).any():
        raise InputError(f"samples.{policy.reward_column}: {role} samples of one {policy.unit} must share one reward")
    return units


def role_sample_advantage(samples: pd.DataFrame, role: str, policy: RolePolicy) -> pd.Series:
    """GRPO advantage of every `role` sample (indexed by sample_id): its unit's advantage."""
    units = _unit_table(samples, role, policy)
    units["advantage"] = grpo_scalar_advantage(units["reward"].to_numpy(), units["group"].to_numpy(dtype=object))
    rows = samples[samples["role"] == role]
    return pd.Series(
        rows[_UNIT_COLUMN[policy.unit]].astype(str).map(units["advantage"]).to_numpy(dtype=np.float64),
        index=rows["sample_id"].to_numpy(),
    )


def compute_advantages(
    samples: pd.DataFrame, tokens: pd.DataFrame, mode: str, beta: float = OPD_BETA
) -> pd.DataFrame:
    """Tokens with `advantage` filled for `mode`; tokens with loss_mask 0 get exactly 0.

    `samples` must carry the rewards of `pipeline.rl.rewards.compute_rewards`. Roles trained
    with kind "none" (Searchers without supervision) get loss_mask set to 0 here.
    """
    check_mode(mode)
    require_columns(
        samples, ["sample_id", "question_id", "trajectory_id", "request_id", "workflow", "role", "reward", "r_em"], "samples"
    )
    require_columns(tokens, ["sample_id", "loss_mask", "old_logp", "teacher_logp"], "tokens")
    require_unique(samples, "sample_id", "samples")
    require_roles(samples, ROLE_POLICY[mode], f"mode {mode}")
    role_of = samples.set_index("sample_id")["role"]
    token_role = tokens["sample_id"].map(role_of)
    if token_role.isna().any():
        raise InputError(f"tokens.sample_id: {tokens['sample_id'][token_role.isna()].iloc[0]!r} is not in samples")
    if "role" in tokens.columns and (tokens["role"].astype(str) != token_role.astype(str)).any():
        raise InputError("tokens.role: disagrees with the role of the sample in samples")

    out = tokens.copy()
    mask = out["loss_mask"].to_numpy(dtype=np.int64)
    advantage = np.zeros(len(out), dtype=np.float64)
    for role, policy in ROLE_POLICY[mode].items():
        on_role = (token_role == role).to_numpy()
        if policy.kind == "none":
            mask = np.where(on_role, 0, mask)
        elif policy.kind == "opd":
            advantage[on_role] = opd_advantage(
                torch.as_tensor(out["teacher_logp"].to_numpy(dtype=np.float64)[on_role]),
                torch.as_tensor(out["old_logp"].to_numpy(dtype=np.float64)[on_role]),
                torch.as_tensor(mask[on_role]),
                beta,
            ).numpy()
        elif on_role.any():
            per_sample = role_sample_advantage(samples, role, policy)
            values = out.loc[on_role, "sample_id"].map(per_sample).to_numpy(dtype=np.float64)
            advantage[on_role] = np.where(mask[on_role] > 0, values, 0.0)
    out["loss_mask"] = mask
    out["advantage"] = advantage
    return out
