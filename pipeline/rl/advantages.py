"""Role-scoped advantages (docs/method.md §5.2-5.4): one estimator over tensors, and the adapter from
the samples and tokens tables to it.

The maths is `compute_multiagent_opd_advantage`, registered with verl as "multiagent_opd"
(verl's `core_algos` style: a pure function of tensors with explicit masks). Per row (one
model call) it places either the GRPO advantage of the row's reward unit, from verl's
`compute_grpo_outcome_advantage`, or the token-level Searcher OPD advantage
`beta * M_t * (teacher_logp - old_logp)`, on the row's loss tokens. A tied GRPO group gets 0:
tied on its rewards (verl), or with `tie_on` "outcome" also on its outcomes before the
assignment bonus and the KL term (docs/method.md §5.3).

`estimator_inputs` turns the tables into the estimator's arguments: GRPO groups are built
from explicit columns (role, workflow, and the scope's id: question_id or request_id), so a
group never mixes roles or workflows; a unit (a trajectory or a sample) carries one reward.
`compute_advantages` is the table path the trainer and the audits use.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, register_adv_est

from pipeline.errors import InputError
from pipeline.rl.batch import last_token_rewards, pad_column, unpad
from pipeline.rl.checks import require_columns, require_finite, require_roles, require_unique
from pipeline.systems import ROLE_IDS, System, trained_system

ESTIMATOR_NAME = "multiagent_opd"
GRPO_EPSILON = 1e-6
NO_UNIT = -1  # row_unit of a row that gets no GRPO advantage (OPD or untrained)
_SCOPE_COLUMN = {"question": "question_id", "request": "request_id"}
_UNIT_COLUMN = {"trajectory": "trajectory_id", "sample": "sample_id"}


# --------------------------------------------------------------------------- the maths


def tied_groups(unit_key: np.ndarray, unit_group: np.ndarray) -> np.ndarray:
    """(U,) bool: the unit's group has more than one unit and all of them share one `unit_key`."""
    groups = pd.Series(np.asarray(unit_group, dtype=object))
    key = pd.Series(np.asarray(unit_key, dtype=np.float64))
    spread = key.groupby(groups.to_numpy()).agg(lambda r: r.max() - r.min())
    sizes = groups.map(groups.value_counts()).to_numpy()
    return (groups.map(spread).to_numpy(dtype=np.float64) == 0.0) & (sizes > 1)


def grpo_unit_advantage(unit_reward: np.ndarray, unit_group: np.ndarray, epsilon: float = GRPO_EPSILON,
                        unit_tie: np.ndarray | None = None) -> np.ndarray:
    """(U,) advantages of U reward units: verl GRPO, (R - mean_g) / (std_g + eps), unbiased std.

    Runs verl in float64 (in float32 its group mean of equal rewards is off by ~1e-8, which the
    1e-6 epsilon blows up to advantages of ~0.05), and sets tied groups to exactly 0: groups of
    identical rewards, or with `unit_tie` (U,) groups of identical `unit_tie` values (the
    outcome before bonuses and the KL term: a group tied on it gets no signal from what is left).
    verl gives a singleton group mean 0 and std 1, i.e. the advantage R / (1 + eps), not 0.
    Each unit's reward sits on its only token: verl sums token rewards, so this equals the reward
    on the last loss token of a real response.
    """
    rewards = np.asarray(unit_reward, dtype=np.float64)
    if len(rewards) == 0:
        return rewards
    groups = np.asarray(unit_group, dtype=object)
    token_level = torch.tensor(rewards).unsqueeze(-1)
    adv, _ = compute_grpo_outcome_advantage(
        token_level_rewards=token_level,
        response_mask=torch.ones_like(token_level),
        index=groups,
        epsilon=epsilon,
    )
    adv = adv.squeeze(-1).numpy().copy()
    adv[tied_groups(rewards, groups)] = 0.0
    if unit_tie is not None:
        if len(unit_tie) != len(rewards):
            raise InputError(f"unit_tie: expected {len(rewards)} values, got {len(unit_tie)}")
        adv[tied_groups(unit_tie, groups)] = 0.0
    return adv


def opd_advantage(
    teacher_logp: torch.Tensor, old_logp: torch.Tensor, loss_mask: torch.Tensor, beta: float
) -> torch.Tensor:
    """Searcher OPD: A_t = beta * M_t * (teacher_logp - old_logp); exactly 0 where M_t = 0."""
    on = loss_mask > 0
    if torch.isnan(teacher_logp[on]).any():
        raise InputError("tokens.teacher_logp: expected Teacher log-probs on every Searcher loss token (OPD)")
    return torch.where(on, beta * (teacher_logp - old_logp), torch.zeros_like(old_logp))


@register_adv_est(ESTIMATOR_NAME)
def compute_multiagent_opd_advantage(
    token_level_rewards: torch.Tensor,
    response_mask: torch.Tensor,
    index: np.ndarray | None = None,
    config: Any = None,
    *,
    row_unit: np.ndarray,
    unit_reward: np.ndarray,
    unit_group: np.ndarray,
    opd_rows: np.ndarray,
    old_log_probs: torch.Tensor,
    teacher_log_probs: torch.Tensor | None,
    beta: float,
    epsilon: float = GRPO_EPSILON,
    unit_tie: np.ndarray | None = None,
    **_: Any,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages of a batch of model calls, 0 wherever `response_mask` is 0.

    Shapes: token_level_rewards, response_mask, old_log_probs, teacher_log_probs (bs, L);
    row_unit, opd_rows (bs,); unit_reward, unit_group (U,). A row with `opd_rows` gets
    beta * mask * (teacher - old) per token; a row with row_unit u >= 0 gets the GRPO advantage
    of unit u (groups `unit_group`, rewards `unit_reward`, ties also on `unit_tie` when given)
    on every loss token; a row with
    neither gets 0. A unit may have no rows (a trajectory where the role never acted still
    counts in its group's baseline). `token_level_rewards` and `index` (verl's prompt uid) are
    verl's signature and not read: the rewards that matter are the units'.
    Returns (advantages, returns), both the advantages, like verl's GRPO.
    """
    mask = response_mask.to(torch.float64)
    row_unit = np.asarray(row_unit, dtype=np.int64)
    opd_rows = np.asarray(opd_rows, dtype=bool)
    if len(row_unit) != mask.shape[0] or len(opd_rows) != mask.shape[0]:
        raise InputError(f"row_unit, opd_rows: expected {mask.shape[0]} rows, got {len(row_unit)}, {len(opd_rows)}")
    if (opd_rows & (row_unit != NO_UNIT)).any():
        raise InputError("row_unit: a row is both OPD and a GRPO unit")
    advantages = torch.zeros_like(mask)
    grpo = row_unit != NO_UNIT
    if grpo.any():
        unit_adv = torch.as_tensor(grpo_unit_advantage(unit_reward, unit_group, epsilon, unit_tie))
        per_row = unit_adv[torch.tensor(row_unit[grpo])]
        rows = torch.tensor(grpo)
        advantages[rows] = torch.where(mask[rows] > 0, per_row.unsqueeze(-1), torch.zeros_like(mask[rows]))
    if opd_rows.any():
        if teacher_log_probs is None:
            raise InputError("teacher_log_probs: required for OPD rows")
        rows = torch.tensor(opd_rows)
        advantages[rows] = opd_advantage(
            teacher_log_probs[rows].to(torch.float64), old_log_probs[rows].to(torch.float64), mask[rows], beta
        )
    advantages = advantages.to(token_level_rewards.dtype)
    return advantages, advantages


# --------------------------------------------------------------------------- tables -> tensors


@dataclass(frozen=True)
class Units:
    """The GRPO reward units of a batch: each row's unit (NO_UNIT for none), and per unit
    its reward, its group and the role it rewards."""

    row_unit: np.ndarray  # (n_samples,) int
    reward: np.ndarray  # (U,) float64
    group: np.ndarray  # (U,) int
    role: np.ndarray  # (U,) str
    outcome: np.ndarray  # (U,) float64: the reward before bonuses and the KL term (samples.outcome)


TIE_ON = ("reward", "outcome")


def grpo_units(samples: pd.DataFrame, system: System) -> Units:
    """The reward units of every GRPO role of `system`, in order of first appearance.

    A role's units are its samples' trajectories or samples, and with reward_column "r_em" every
    trajectory of the batch (also those where the role never acted). A group is one
    (role, workflow, scope id); a unit must have one reward, one outcome and one group. A unit's
    outcome is samples.outcome (pipeline.rl.rewards.tie_outcome), or R_EM where the role's
    reward is R_EM; NaN where samples has no outcome column.
    """
    row_unit = np.full(len(samples), NO_UNIT, dtype=np.int64)
    rewards: list[np.ndarray] = []
    outcomes: list[np.ndarray] = []
    groups: list[pd.DataFrame] = []
    n_units = 0
    for role, policy in system.roles.items():
        if policy.kind != "grpo":
            continue
        scope = _SCOPE_COLUMN[policy.scope]
        on_role = (samples["role"] == role).to_numpy()
        rows = samples if policy.reward_column == "r_em" else samples[on_role]
        if (rows[scope].astype(str) == "").any():
            raise InputError(f"samples.{scope}: expected a non-empty id for {policy.scope}-scoped GRPO")
        require_finite(rows[policy.reward_column], f"samples.{policy.reward_column}", f"{role} GRPO")
        outcome_column = "r_em" if policy.reward_column == "r_em" else "outcome"
        keys = pd.DataFrame({
            "unit": rows[_UNIT_COLUMN[policy.unit]].astype(str).to_numpy(),
            "workflow": rows["workflow"].astype(str).to_numpy(),
            "scope": rows[scope].astype(str).to_numpy(),
            "reward": rows[policy.reward_column].to_numpy(dtype=np.float64),
            "outcome": (rows[outcome_column].to_numpy(dtype=np.float64) if outcome_column in rows.columns
                        else np.full(len(rows), np.nan)),
        })
        per_unit = keys.groupby("unit", sort=False).agg(
            n_groups=("scope", "nunique"), n_workflows=("workflow", "nunique"), workflow=("workflow", "first"),
            scope=("scope", "first"), reward=("reward", "first"), spread=("reward", lambda r: r.max() - r.min()),
            outcome=("outcome", "first"), outcomes=("outcome", lambda r: r.nunique(dropna=False)),
        )
        if (per_unit["n_groups"] > 1).any() or (per_unit["n_workflows"] > 1).any() or (per_unit["spread"] != 0).any() \
                or (per_unit["outcomes"] > 1).any():
            raise InputError(f"samples.{policy.reward_column}: {role} samples of one {policy.unit} must share "
                             "one reward, one outcome and one group")
        position = pd.Series(np.arange(len(per_unit)) + n_units, index=per_unit.index)
        row_unit[on_role] = samples.loc[on_role, _UNIT_COLUMN[policy.unit]].astype(str).map(position).to_numpy()
        rewards.append(per_unit["reward"].to_numpy(dtype=np.float64))
        outcomes.append(per_unit["outcome"].to_numpy(dtype=np.float64))
        groups.append(per_unit[["workflow", "scope"]].assign(role=role))
        n_units += len(per_unit)
    if not groups:
        return Units(row_unit, np.zeros(0), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object), np.zeros(0))
    keys = pd.concat(groups, ignore_index=True)
    group = keys.groupby(["role", "workflow", "scope"], sort=False).ngroup().to_numpy(dtype=np.int64)
    return Units(row_unit, np.concatenate(rewards), group, keys["role"].to_numpy(dtype=object),
                 np.concatenate(outcomes))


def unit_tie(units: Units, tie_on: str) -> np.ndarray | None:
    """What groups are tied on besides the reward: the units' outcomes ("outcome") or nothing ("reward")."""
    if tie_on not in TIE_ON:
        raise InputError(f"tie_on: expected one of {TIE_ON}, got {tie_on!r}")
    if tie_on == "reward":
        return None
    if np.isnan(units.outcome).any():
        raise InputError("samples.outcome: expected an outcome on every GRPO unit (tie_on: outcome; "
                         "pipeline.rl.rewards.compute_rewards adds it)")
    return units.outcome


def trained_mask(samples: pd.DataFrame, tokens: pd.DataFrame, system: System) -> np.ndarray:
    """tokens.loss_mask with every token of a role trained with kind "none" set to 0."""
    untrained = [role for role, p in system.roles.items() if p.kind == "none"]
    role_of = samples.set_index("sample_id")["role"]
    off = tokens["sample_id"].map(role_of).isin(untrained).to_numpy()
    return np.where(off, 0, tokens["loss_mask"].to_numpy(dtype=np.int64))


def estimator_inputs(samples: pd.DataFrame, tokens: pd.DataFrame, system: System | str, beta: float,
                     tie_on: str = "reward") -> dict[str, Any]:
    """Keyword arguments of `compute_multiagent_opd_advantage` for a batch, rows in `samples` order.

    Uses samples.reward / samples.r_em (and samples.outcome with tie_on "outcome"; from
    compute_rewards) and the tokens' loss_mask, old_logp, teacher_logp; response_mask is 0 on
    the tokens of untrained roles.
    """
    system = trained_system(system) if isinstance(system, str) else system
    require_unique(samples, "sample_id", "samples")
    ids = samples["sample_id"].to_numpy(dtype=object)
    units = grpo_units(samples, system)
    opd_roles = [role for role, p in system.roles.items() if p.kind == "opd"]
    masked = tokens.assign(loss_mask=trained_mask(samples, tokens, system))
    return {
        "token_level_rewards": last_token_rewards(masked, ids, samples["reward"].to_numpy(dtype=np.float64)),
        "response_mask": pad_column(masked, ids, "loss_mask"),
        "index": samples["question_id"].astype(str).to_numpy(dtype=object),
        "row_unit": units.row_unit,
        "unit_reward": units.reward,
        "unit_group": units.group,
        "unit_tie": unit_tie(units, tie_on),
        "opd_rows": samples["role"].isin(opd_roles).to_numpy(),
        "role_ids": np.array([ROLE_IDS[r] for r in samples["role"]], dtype=np.int64),
        "old_log_probs": pad_column(masked, ids, "old_logp"),
        "teacher_log_probs": pad_column(masked, ids, "teacher_logp", fill=float("nan")),
        "beta": beta,
    }


def compute_advantages(
    samples: pd.DataFrame, tokens: pd.DataFrame, system: System | str, beta: float, tie_on: str = "reward"
) -> pd.DataFrame:
    """Tokens with `advantage` filled for `system` (trained systems of pipeline.systems); tokens with
    loss_mask 0 get exactly 0. `tie_on` "outcome": a GRPO group whose units share one outcome
    (samples.outcome) gets 0 even where bonuses or the KL term spread its rewards.

    `samples` must carry the rewards of `pipeline.rl.rewards.compute_rewards`. Roles trained
    with kind "none" (Searchers without supervision) get loss_mask set to 0 here.
    """
    system = trained_system(system) if isinstance(system, str) else system
    require_columns(
        samples,
        ["sample_id", "question_id", "trajectory_id", "request_id", "workflow", "role", "reward", "r_em"],
        "samples",
    )
    require_columns(tokens, ["sample_id", "loss_mask", "old_logp", "teacher_logp"], "tokens")
    require_unique(samples, "sample_id", "samples")
    require_roles(samples, system.roles, f"system {system.name}")
    role_of = samples.set_index("sample_id")["role"]
    token_role = tokens["sample_id"].map(role_of)
    if token_role.isna().any():
        raise InputError(f"tokens.sample_id: {tokens['sample_id'][token_role.isna()].iloc[0]!r} is not in samples")
    if "role" in tokens.columns and (tokens["role"].astype(str) != token_role.astype(str)).any():
        raise InputError("tokens.role: disagrees with the role of the sample in samples")

    out = tokens.copy()
    out["loss_mask"] = trained_mask(samples, tokens, system)
    advantages, _ = compute_multiagent_opd_advantage(**estimator_inputs(samples, tokens, system, beta, tie_on))
    out["advantage"] = unpad(out, samples["sample_id"].to_numpy(dtype=object), advantages)
    return out
