"""Rewards of docs/method.md §5 as pure functions over the samples table.

Each function returns a copy of `samples` with columns added; `reward` is filled
role by role and ends as exactly the value that enters the advantage (after the
KL-in-reward term). Searchers trained by OPD have no scalar reward: NaN. Every weight
comes from `common.rewards` of params.yaml (a RewardParams).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch
from verl.trainer.ppo.core_algos import kl_penalty

from pipeline.config import RewardParams
from pipeline.errors import InputError
from pipeline.eval.em import exact_match
from pipeline.eval.funnel import holds, words
from pipeline.rl.checks import require_columns, require_finite, require_roles, require_unique
from pipeline.systems import KL_ROLES, System, trained_system

REWARD_COLUMNS = ("correct", "r_em", "b_s", "report_held", "judge_score", "kl_to_teacher", "outcome", "reward")
SEARCHER_OUTCOMES = ("team", "report")


def _flag(samples: pd.DataFrame, column: str) -> np.ndarray:
    """A bool column as a numpy array; NaN/None is an error, not False."""
    if samples[column].isna().any():
        raise InputError(f"samples.{column}: expected bool, found missing values")
    return samples[column].astype(bool).to_numpy()


def _with_role_values(samples: pd.DataFrame, column: str, role: str, values: np.ndarray) -> pd.DataFrame:
    """Copy of `samples` with `column` set to `values` on `role` rows (NaN-created if absent)."""
    out = samples.copy()
    if column not in out.columns:
        out[column] = np.nan
    out[column] = out[column].astype(np.float64)
    out.loc[(out["role"] == role).to_numpy(), column] = values
    return out


def _correct(answer: object, golden: object, row: int) -> bool:
    """c_ij by the evaluation's exact match; a missing answer (None/NaN) is wrong."""
    try:
        return exact_match(answer if isinstance(answer, str) else None, golden)
    except InputError as e:
        raise InputError(f"samples row {row}: {e}") from e


def answerer_correctness(samples: pd.DataFrame) -> pd.DataFrame:
    """Add `correct` = c_ij (1.0/0.0) on Answerer rows, NaN elsewhere; malformed -> 0."""
    require_columns(samples, ["role", "answer", "golden_answers", "malformed"], "samples")
    is_answerer = (samples["role"] == "answerer").to_numpy()
    malformed = _flag(samples, "malformed")
    rows = np.flatnonzero(is_answerer)
    correct = np.array(
        [
            0.0
            if malformed[i]
            else float(_correct(samples["answer"].iat[i], samples["golden_answers"].iat[i], i))
            for i in rows
        ],
        dtype=np.float64,
    )
    return _with_role_values(samples, "correct", "answerer", correct)


def team_outcome(samples: pd.DataFrame) -> pd.DataFrame:
    """Add `r_em` on every row: max_j c_ij over the trajectory's final answer request, 0 if none."""
    require_columns(samples, ["trajectory_id", "role", "request_id", "is_final_request", "correct"], "samples")
    final = samples[(samples["role"] == "answerer").to_numpy() & _flag(samples, "is_final_request")]
    n_requests = final.groupby("trajectory_id")["request_id"].nunique()
    if (n_requests > 1).any():
        raise InputError(
            f"samples.is_final_request: expected one final request per trajectory, "
            f"trajectory {n_requests[n_requests > 1].index[0]!r} has {int(n_requests.max())}"
        )
    require_finite(final["correct"], "samples.correct", "final Answerer rows")
    r_em = final.groupby("trajectory_id")["correct"].max()
    out = samples.copy()
    out["r_em"] = out["trajectory_id"].map(r_em).fillna(0.0).astype(np.float64)
    return out


def search_bonus(n_search: np.ndarray, reported: np.ndarray) -> np.ndarray:
    """b_S: 0.5 for exactly one search then a report, 1 for >= 2 searches then a report, else 0."""
    return np.where(reported & (n_search >= 2), 1.0, np.where(reported & (n_search == 1), 0.5, 0.0))


def report_held(samples: pd.DataFrame) -> np.ndarray:
    """Per Searcher row: 1.0 when its report holds a gold alias (pipeline.eval.funnel's whole-word
    match of the EM normalisation), else 0.0."""
    require_columns(samples, ["role", "report", "golden_answers"], "samples")
    rows = samples[samples["role"] == "searcher"]
    return np.array([float(holds(words(str(report or "")), [str(a) for a in golden]))
                     for report, golden in zip(rows["report"], rows["golden_answers"])], dtype=np.float64)


def searcher_stage1_reward(samples: pd.DataFrame, weights: RewardParams, outcome: str = "team") -> pd.DataFrame:
    """Stage I Searcher: `b_s`, and reward R_S = 0.9 O + 0.1 b_S (malformed -> -1), where the outcome
    O is the team's R_EM (`outcome` "team", the paper's) or whether the Searcher's own report holds
    a gold alias ("report", also written to `report_held`)."""
    if outcome not in SEARCHER_OUTCOMES:
        raise InputError(f"searcher_outcome: expected one of {SEARCHER_OUTCOMES}, got {outcome!r}")
    require_columns(samples, ["role", "n_search", "reported", "malformed", "r_em"], "samples")
    rows = samples[samples["role"] == "searcher"]
    b_s = search_bonus(rows["n_search"].to_numpy(dtype=np.int64), _flag(rows, "reported"))
    out = _with_role_values(samples, "b_s", "searcher", b_s)
    if outcome == "report":
        held = report_held(samples)
        out = _with_role_values(out, "report_held", "searcher", held)
    else:
        held = rows["r_em"].to_numpy(dtype=np.float64)
    reward = weights.searcher_em_weight * held + weights.behaviour_weight * b_s
    reward = np.where(_flag(rows, "malformed"), weights.malformed_reward, reward)
    return _with_role_values(out, "reward", "searcher", reward)


def leader_reward(samples: pd.DataFrame, weights: RewardParams) -> pd.DataFrame:
    """Leader: R_L = 0.9 R_EM + 0.1 min(C_tool, 6)/6, -1 if any Leader call of the trajectory is malformed."""
    require_columns(samples, ["trajectory_id", "role", "c_tool", "malformed", "r_em"], "samples")
    rows = samples[samples["role"] == "leader"]
    c_tool = rows["c_tool"].to_numpy(dtype=np.float64)
    if (c_tool < 0).any() or not np.isfinite(c_tool).all():
        raise InputError("samples.c_tool: expected a non-negative integer on Leader rows")
    if (rows.groupby("trajectory_id")["c_tool"].nunique() > 1).any():
        raise InputError("samples.c_tool: expected one value per trajectory (a trajectory-level column)")
    cap = weights.c_tool_cap
    reward = weights.leader_em_weight * rows["r_em"].to_numpy(dtype=np.float64) + weights.assign_weight * (
        np.minimum(c_tool, cap) / cap
    )
    reward = np.where(_leader_malformed(rows), weights.malformed_reward, reward)
    return _with_role_values(samples, "reward", "leader", reward)


def _leader_malformed(rows: pd.DataFrame) -> np.ndarray:
    """Per Leader row: whether any Leader call of its trajectory is malformed."""
    return rows.assign(_m=_flag(rows, "malformed")).groupby("trajectory_id")["_m"].transform("any").to_numpy(bool)


def tie_outcome(samples: pd.DataFrame, weights: RewardParams) -> pd.DataFrame:
    """Add `outcome`, what a GRPO group is tied on when ties count on the outcome (docs/method.md §5.3):
    each row's reward before the KL term, except the Leader's, which is its trajectory's R_EM
    without the assignment bonus (malformed -> the malformed reward). Call after the role rewards
    and before `kl_in_reward`."""
    require_columns(samples, ["role", "reward", "r_em", "malformed"], "samples")
    out = samples.copy()
    out["outcome"] = out["reward"].astype(np.float64)
    rows = out[out["role"] == "leader"]
    if len(rows):
        outcome = np.where(_leader_malformed(rows), weights.malformed_reward, rows["r_em"].to_numpy(np.float64))
        out = _with_role_values(out, "outcome", "leader", outcome)
    return out


def answerer_reward(samples: pd.DataFrame, weights: RewardParams) -> pd.DataFrame:
    """Answerer candidate: R_A = c_ij; a malformed candidate gets -1 (docs/method.md §5.1, our choice)."""
    require_columns(samples, ["role", "malformed", "correct"], "samples")
    rows = samples[samples["role"] == "answerer"]
    reward = np.where(_flag(rows, "malformed"), weights.malformed_reward, rows["correct"].to_numpy(dtype=np.float64))
    return _with_role_values(samples, "reward", "answerer", reward)


def outcome_searcher_reward(samples: pd.DataFrame, weights: RewardParams) -> pd.DataFrame:
    """Outcome-RL Searcher ablation: R_S = R_EM of the trajectory (no malformed penalty: docs/method.md §5.4
    asks for the same value on all Searcher tokens of a trajectory)."""
    require_columns(samples, ["role", "r_em"], "samples")
    rows = samples[samples["role"] == "searcher"]
    return _with_role_values(samples, "reward", "searcher", rows["r_em"].to_numpy(dtype=np.float64))


def prompted_critic_searcher_reward(samples: pd.DataFrame, weights: RewardParams) -> pd.DataFrame:
    """Prompted critic: R_S = 0.5 R_EM + 0.5 judge_score/10 (malformed -> -1); judge_score in 0..10."""
    require_columns(samples, ["role", "malformed", "r_em", "judge_score"], "samples")
    rows = samples[samples["role"] == "searcher"]
    malformed = _flag(rows, "malformed")
    score = rows["judge_score"].to_numpy(dtype=np.float64)
    ok = ~malformed
    if not np.isfinite(score[ok]).all() or ((score[ok] < 0) | (score[ok] > 10)).any():
        raise InputError("samples.judge_score: expected a number in 0..10 on every well-formed Searcher row")
    em_weight = weights.critic_em_weight
    reward = em_weight * rows["r_em"].to_numpy(dtype=np.float64) + (1.0 - em_weight) * score / 10.0
    reward = np.where(malformed, weights.malformed_reward, reward)
    return _with_role_values(samples, "reward", "searcher", reward)


def _kl_by_sample(samples: pd.DataFrame, tokens: pd.DataFrame) -> pd.DataFrame:
    """Per Leader/Answerer sample: n_loss, n_scored (loss tokens with a teacher_logp) and
    kl = sum over loss tokens of verl's "kl" estimate, old_logp - teacher_logp."""
    rows = samples[samples["role"].isin(KL_ROLES)]
    tok = tokens[tokens["sample_id"].isin(rows["sample_id"]) & (tokens["loss_mask"].to_numpy() == 1)]
    old = torch.tensor(tok["old_logp"].to_numpy(dtype=np.float64))
    teacher = torch.tensor(tok["teacher_logp"].to_numpy(dtype=np.float64))
    per_token = kl_penalty(old, teacher, kl_penalty="kl").numpy()
    frame = pd.DataFrame({"sample_id": tok["sample_id"].to_numpy(), "kl": per_token, "scored": ~np.isnan(per_token)})
    stats = frame.groupby("sample_id").agg(kl=("kl", "sum"), n_scored=("scored", "sum"), n_loss=("scored", "size"))
    stats = stats.reindex(rows["sample_id"].to_numpy(), fill_value=0)
    mixed = stats[(stats["n_scored"] > 0) & (stats["n_scored"] < stats["n_loss"])]
    if len(mixed):
        raise InputError(f"tokens.teacher_logp: NaN on some loss tokens of sample {mixed.index[0]!r}")
    stats["unscored"] = (stats["n_loss"] > 0) & (stats["n_scored"] == 0)
    stats["role"] = rows["role"].to_numpy()
    stats["trajectory_id"] = rows["trajectory_id"].to_numpy()
    return stats


def kl_in_reward(
    samples: pd.DataFrame,
    tokens: pd.DataFrame,
    coef: float,
    *,
    require_teacher: bool = False,
) -> pd.DataFrame:
    """KL to the Teacher in the Leader and Answerer rewards (docs/method.md §5.2, verl use_kl_in_reward, "kl").

    kl_to_teacher = sum over loss tokens of (old_logp - teacher_logp); reward -= coef * kl_to_teacher.
    Answerer: per sample. Leader: summed over all Leader samples of the trajectory, because the
    Leader's reward and advantage are one value per trajectory (docs/method.md §5.2); every Leader row of the
    trajectory carries that sum. Loss tokens all NaN in teacher_logp = no Teacher: kl_to_teacher NaN
    and reward unchanged (an error when `require_teacher`). A sample without loss tokens adds 0.
    Apply once: the function refuses a table whose kl_to_teacher is already filled.
    """
    require_columns(samples, ["sample_id", "trajectory_id", "role", "reward"], "samples")
    require_columns(tokens, ["sample_id", "loss_mask", "old_logp", "teacher_logp"], "tokens")
    require_unique(samples, "sample_id", "samples")
    if "kl_to_teacher" in samples.columns and samples["kl_to_teacher"].notna().any():
        raise InputError("samples.kl_to_teacher: already filled; the KL term must be applied once")
    stats = _kl_by_sample(samples, tokens)
    if require_teacher and stats["unscored"].any():
        raise InputError(
            "tokens.teacher_logp: expected Teacher log-probs on the loss tokens of "
            f"{stats.index[stats['unscored']][0]!r}"
        )
    kl = stats["kl"].where(~stats["unscored"]).astype(np.float64)
    leader = stats[stats["role"] == "leader"]
    per_traj = leader.groupby("trajectory_id").agg(kl=("kl", "sum"), unscored=("unscored", "sum"),
                                                   scored=("n_scored", "sum"))
    if ((per_traj["unscored"] > 0) & (per_traj["scored"] > 0)).any():
        raise InputError("tokens.teacher_logp: a trajectory has Leader samples with and without Teacher scores")
    traj_kl = per_traj["kl"].where(per_traj["unscored"] == 0)
    kl.loc[leader.index] = leader["trajectory_id"].map(traj_kl).to_numpy(dtype=np.float64)
    out = samples.copy()
    out["kl_to_teacher"] = out["sample_id"].map(kl).astype(np.float64)
    has = out["kl_to_teacher"].notna().to_numpy()
    require_finite(out.loc[has, "reward"], "samples.reward", "Leader/Answerer rows before the KL term")
    out.loc[has, "reward"] = out.loc[has, "reward"] - coef * out.loc[has, "kl_to_teacher"]
    return out


_SEARCHER_REWARD = {
    "em_and_behaviour": searcher_stage1_reward,
    "outcome": outcome_searcher_reward,
    "critic": prompted_critic_searcher_reward,
}


def compute_rewards(
    samples: pd.DataFrame, tokens: pd.DataFrame, system: System | str, weights: RewardParams,
    searcher_outcome: str = "team",
) -> pd.DataFrame:
    """All reward columns for one rollout batch of training `system` (pipeline.systems), weighted by `weights`.

    Adds correct, r_em, b_s, report_held (Stage I with `searcher_outcome` "report"), judge_score
    (kept from the input where the system has a judge, else NaN), outcome (`tie_outcome`),
    kl_to_teacher and reward. Searchers without a scalar reward (OPD, no supervision) get reward
    NaN. KL-in-reward: in every system with a Teacher, whose scores are then required on every
    Leader and Answerer loss token; none without a Teacher.
    """
    system = trained_system(system) if isinstance(system, str) else system
    require_columns(samples, ["sample_id", "trajectory_id", "workflow", "role"], "samples")
    require_roles(samples, system.roles, f"system {system.name}")
    bad_workflow = samples["workflow"] != system.workflow
    if bad_workflow.any():
        raise InputError(
            f"samples.workflow: system {system.name} expects {system.workflow!r}, "
            f"found {samples['workflow'][bad_workflow].iloc[0]!r}"
        )
    keep_judge = system.training.judge is not None
    out = samples.drop(columns=[c for c in REWARD_COLUMNS
                                if c in samples.columns and not (keep_judge and c == "judge_score")])
    if not keep_judge:
        out["judge_score"] = np.nan
    out["b_s"] = np.nan
    out["report_held"] = np.nan
    out["reward"] = np.nan
    out = team_outcome(answerer_correctness(out))
    out = answerer_reward(out, weights)
    if "leader" in system.roles:
        out = leader_reward(out, weights)
    if system.training.searcher_reward == "em_and_behaviour":
        out = searcher_stage1_reward(out, weights, searcher_outcome)
    elif system.training.searcher_reward != "none":
        out = _SEARCHER_REWARD[system.training.searcher_reward](out, weights)
    out = tie_outcome(out, weights)
    if not system.kl_in_reward:
        out["kl_to_teacher"] = np.nan
        return out
    return kl_in_reward(out, tokens, weights.kl_coef, require_teacher=True)
