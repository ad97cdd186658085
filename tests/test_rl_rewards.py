"""Rewards of docs/method.md §5 on small hand-made samples/tokens tables (docs/contracts.md)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.rl.rewards import (
    answerer_correctness,
    answerer_reward,
    compute_rewards,
    kl_in_reward,
    leader_reward,
    prompted_critic_searcher_reward,
    search_bonus,
    searcher_stage1_reward,
    team_outcome,
)
from tests.helpers.configs import REWARDS


def srow(sample_id: str, role: str, traj: str = "q1/t0", **kw) -> dict:
    row = dict(
        sample_id=sample_id, question_id=traj.split("/")[0], trajectory_id=traj, workflow="hierarchy",
        role=role, call_id=0, agent_id=role, request_id="", candidate_id=-1, malformed=False,
        n_search=0, reported=False, answer="", golden_answers=["Paris", "City of Light"], c_tool=0,
        is_final_request=False, action="",
    )
    row.update(kw)
    return row


def trows(sample_id: str, role: str, old: list[float], teacher: list[float], mask: list[int]) -> list[dict]:
    return [
        dict(sample_id=sample_id, pos=i, token_id=i, role=role, source="generated" if m else "observation",
             loss_mask=m, old_logp=o, teacher_logp=t, advantage=0.0)
        for i, (o, t, m) in enumerate(zip(old, teacher, mask))
    ]


def cand(traj: str, k: int, answer: str, n: int = 0, final: bool = True, **kw) -> dict:
    return srow(f"{traj}/c9/k{k}", "answerer", traj, request_id=f"{traj}/a{n}", candidate_id=k,
                answer=answer, is_final_request=final, call_id=9, **kw)


def test_correctness_normalised_match_against_every_alias():
    s = pd.DataFrame([
        cand("q1/t0", 0, "The city of light!"), cand("q1/t0", 1, "paris."), cand("q1/t0", 2, "Lyon"),
        cand("q1/t0", 3, "Paris", malformed=True), srow("q1/t0/c0", "leader"),
    ])
    out = answerer_correctness(s)
    assert out["correct"].tolist()[:4] == [1.0, 1.0, 0.0, 0.0]
    assert math.isnan(out["correct"].iloc[4])


def test_answer_and_alias_that_normalise_to_empty_match_as_in_the_references():
    s = pd.DataFrame([cand("q1/t0", 0, "", golden_answers=["the"]), cand("q1/t0", 1, "a", golden_answers=["the"]),
                      cand("q1/t0", 2, "x", golden_answers=["the"])])
    assert answerer_correctness(s)["correct"].tolist() == [1.0, 1.0, 0.0]


def test_a_single_gold_string_is_one_alias_and_bad_golden_answers_name_the_row():
    s = answerer_correctness(pd.DataFrame([cand("q1/t0", 0, "Paris", golden_answers="Paris"),
                                           cand("q1/t0", 1, "Paris", golden_answers="Paris, France")]))
    assert s["correct"].tolist() == [1.0, 0.0]
    with pytest.raises(InputError, match="samples row 0: golden_answers"):
        answerer_correctness(pd.DataFrame([cand("q1/t0", 0, "Paris", golden_answers=3)]))


def test_team_outcome_is_max_over_final_request_only():
    s = pd.DataFrame([
        cand("q1/t0", 0, "Lyon"), cand("q1/t0", 1, "Paris"), srow("q1/t0/c0", "leader"),
        cand("q1/t1", 0, "Paris", n=0, final=False), cand("q1/t1", 1, "Lyon", n=1),
        srow("q1/t2/c0", "leader", "q1/t2"),
    ])
    out = team_outcome(answerer_correctness(s)).set_index("sample_id")["r_em"]
    assert out["q1/t0/c0"] == 1.0 and out["q1/t0/c9/k0"] == 1.0
    assert out["q1/t1/c9/k0"] == 0.0  # a right answer in a non-final request does not count
    assert out["q1/t2/c0"] == 0.0  # no answer request at all


def test_team_outcome_rejects_two_final_requests():
    s = answerer_correctness(pd.DataFrame([cand("q1/t0", 0, "Paris", n=0), cand("q1/t0", 1, "Paris", n=1)]))
    with pytest.raises(InputError, match="is_final_request"):
        team_outcome(s)


@pytest.mark.parametrize(
    "n_search, reported, expected",
    [(0, True, 0.0), (1, True, 0.5), (2, True, 1.0), (5, True, 1.0), (3, False, 0.0), (1, False, 0.0)],
)
def test_search_bonus_values(n_search, reported, expected):
    assert search_bonus(np.array([n_search]), np.array([reported]))[0] == expected


def test_stage1_searcher_reward_and_malformed():
    s = pd.DataFrame([
        srow("a", "searcher", "q1/t0", n_search=1, reported=True, r_em=1.0, workflow="cascade"),
        srow("b", "searcher", "q1/t1", n_search=2, reported=True, r_em=0.0, workflow="cascade"),
        srow("c", "searcher", "q1/t2", n_search=4, reported=True, r_em=1.0, malformed=True, workflow="cascade"),
        srow("d", "answerer", "q1/t0", r_em=1.0, workflow="cascade"),
    ])
    out = searcher_stage1_reward(s, REWARDS)
    assert out["reward"].iloc[0] == pytest.approx(0.9 * 1 + 0.1 * 0.5)
    assert out["reward"].iloc[1] == pytest.approx(0.9 * 0 + 0.1 * 1.0)
    assert out["reward"].iloc[2] == -1.0
    assert out["b_s"].tolist()[:3] == [0.5, 1.0, 1.0] and math.isnan(out["b_s"].iloc[3])
    assert math.isnan(out["reward"].iloc[3])


def test_leader_reward_caps_c_tool_and_any_malformed_call_gives_minus_one():
    s = pd.DataFrame([
        srow("a0", "leader", "q1/t0", c_tool=9, r_em=1.0), srow("a1", "leader", "q1/t0", c_tool=9, r_em=1.0),
        srow("b0", "leader", "q1/t1", c_tool=3, r_em=0.0),
        srow("c0", "leader", "q1/t2", c_tool=2, r_em=1.0),
        srow("c1", "leader", "q1/t2", c_tool=2, r_em=1.0, malformed=True),
    ])
    out = leader_reward(s, REWARDS)["reward"].tolist()
    assert out[0] == out[1] == pytest.approx(0.9 + 0.1 * 1.0)
    assert out[2] == pytest.approx(0.1 * 3 / 6)
    assert out[3] == out[4] == -1.0


def test_answerer_reward_is_correctness_or_minus_one():
    s = answerer_correctness(pd.DataFrame([cand("q1/t0", 0, "Paris"), cand("q1/t0", 1, "Lyon"),
                                           cand("q1/t0", 2, "Paris", malformed=True)]))
    assert answerer_reward(s, REWARDS)["reward"].tolist() == [1.0, 0.0, -1.0]


def test_prompted_critic_searcher_reward():
    s = pd.DataFrame([
        srow("a", "searcher", r_em=1.0, judge_score=7.0),
        srow("b", "searcher", r_em=0.0, judge_score=10.0),
        srow("c", "searcher", r_em=1.0, judge_score=np.nan, malformed=True),
    ])
    assert prompted_critic_searcher_reward(s, REWARDS)["reward"].tolist() == pytest.approx([0.5 + 0.5 * 0.7, 0.5, -1.0])
    with pytest.raises(InputError, match="judge_score"):
        prompted_critic_searcher_reward(s.assign(malformed=False), REWARDS)


def _kl_case() -> tuple[pd.DataFrame, pd.DataFrame]:
    s = pd.DataFrame([
        srow("L0", "leader", "q1/t0", reward=0.5), srow("L1", "leader", "q1/t0", reward=0.5),
        srow("A0", "answerer", "q1/t0", reward=1.0), srow("S0", "searcher", "q1/t0", reward=np.nan),
    ])
    t = pd.DataFrame(
        trows("L0", "leader", [-1.0, -0.5], [-2.0, -0.25], [1, 1])
        + trows("L1", "leader", [-0.1, -9.0], [-0.4, np.nan], [1, 0])
        + trows("A0", "answerer", [-1.0, -2.0, -3.0], [-1.5, -1.0, -30.0], [1, 1, 0])
        + trows("S0", "searcher", [-1.0], [-5.0], [1])
    )
    return s, t


@pytest.mark.parametrize("coef", [1e-3, 0.5])
def test_kl_in_reward_sums_loss_tokens_and_leader_trajectory(coef):
    s, t = _kl_case()
    out = kl_in_reward(s, t, coef).set_index("sample_id")
    leader_kl = ((-1.0 + 2.0) + (-0.5 + 0.25)) + (-0.1 + 0.4)  # both Leader calls of the trajectory
    answerer_kl = (-1.0 + 1.5) + (-2.0 + 1.0)  # the masked third token does not count
    assert out.loc["L0", "kl_to_teacher"] == pytest.approx(leader_kl)
    assert out.loc["L1", "reward"] == pytest.approx(0.5 - coef * leader_kl)
    assert out.loc["A0", "reward"] == pytest.approx(1.0 - coef * answerer_kl)
    assert math.isnan(out.loc["S0", "kl_to_teacher"]) and math.isnan(out.loc["S0", "reward"])


def test_kl_in_reward_without_teacher_is_a_no_op_or_an_error_when_required():
    s, t = _kl_case()
    t = t.assign(teacher_logp=np.nan)
    out = kl_in_reward(s, t, 1e-3)
    assert out["reward"].tolist()[:3] == [0.5, 0.5, 1.0] and out["kl_to_teacher"].isna().all()
    with pytest.raises(InputError, match="teacher_logp"):
        kl_in_reward(s, t, 1e-3, require_teacher=True)


def test_kl_in_reward_rejects_partial_teacher_scores_and_double_application():
    s, t = _kl_case()
    t.loc[(t["sample_id"] == "A0") & (t["pos"] == 0), "teacher_logp"] = np.nan
    with pytest.raises(InputError, match="teacher_logp"):
        kl_in_reward(s, t, 1e-3)
    s, t = _kl_case()
    with pytest.raises(InputError, match="kl_to_teacher"):
        kl_in_reward(kl_in_reward(s, t, 1e-3), t, 1e-3)


def _hierarchy_batch() -> tuple[pd.DataFrame, pd.DataFrame]:
    s = pd.DataFrame([
        srow("q1/t0/c0", "leader", c_tool=2), srow("q1/t0/c1", "searcher", n_search=2, reported=True,
                                                   judge_score=4.0),
        cand("q1/t0", 0, "Paris", c_tool=2), cand("q1/t0", 1, "Rome", c_tool=2),
    ])
    t = pd.DataFrame(
        trows("q1/t0/c0", "leader", [-1.0], [-1.2], [1])
        + trows("q1/t0/c1", "searcher", [-1.0, -2.0], [-0.5, np.nan], [1, 0])
        + trows("q1/t0/c9/k0", "answerer", [-0.3], [-0.1], [1]) + trows("q1/t0/c9/k1", "answerer", [-0.3], [-0.9], [1])
    )
    return s, t


def test_compute_rewards_opd_mode():
    s, t = _hierarchy_batch()
    out = compute_rewards(s, t, "multiagent_opd", REWARDS).set_index("sample_id")
    assert out.loc["q1/t0/c0", "reward"] == pytest.approx(0.9 + 0.1 * 2 / 6 - 1e-3 * (-1.0 + 1.2))
    assert out.loc["q1/t0/c9/k0", "reward"] == pytest.approx(1.0 - 1e-3 * (-0.3 + 0.1))
    assert out.loc["q1/t0/c9/k1", "reward"] == pytest.approx(0.0 - 1e-3 * (-0.3 + 0.9))
    assert math.isnan(out.loc["q1/t0/c1", "reward"])  # OPD Searchers have no scalar reward
    assert out["r_em"].tolist() == [1.0] * 4


def test_compute_rewards_prompted_critic_and_outcome_rl_modes():
    s, t = _hierarchy_batch()
    critic = compute_rewards(s, t, "prompted_critic", REWARDS).set_index("sample_id")
    assert critic.loc["q1/t0/c1", "reward"] == pytest.approx(0.5 + 0.5 * 4 / 10)
    # The Prompted Critic keeps OPD's Leader objective, KL to the Stage-I Teacher included (docs/method.md §5.4)
    kl = critic.loc["q1/t0/c0", "kl_to_teacher"]
    assert kl == pytest.approx(_kl(s, t, "q1/t0/c0"))
    assert critic.loc["q1/t0/c0", "reward"] == pytest.approx(0.9 + 0.1 * 2 / 6 - 1e-3 * kl)
    with pytest.raises(InputError, match="teacher_logp"):
        compute_rewards(s, t.assign(teacher_logp=np.nan), "prompted_critic", REWARDS)
    outcome = compute_rewards(s, t, "ablation_outcome_rl_searcher", REWARDS).set_index("sample_id")
    assert outcome.loc["q1/t0/c1", "reward"] == 1.0
    assert outcome.loc["q1/t0/c0", "reward"] == pytest.approx(0.9 + 0.1 * 2 / 6 - 1e-3 * (-1.0 + 1.2))
    assert math.isnan(outcome.loc["q1/t0/c1", "judge_score"])
    with pytest.raises(InputError, match="teacher_logp"):  # a mode with a Teacher needs its scores
        compute_rewards(s, t.assign(teacher_logp=np.nan), "ablation_outcome_rl_searcher", REWARDS)


def test_compute_rewards_stage1_has_no_kl_and_checks_the_workflow():
    s = pd.DataFrame([
        srow("q1/t0/c0", "searcher", n_search=1, reported=True, workflow="cascade"),
        cand("q1/t0", 0, "Paris", workflow="cascade"),
    ])
    t = pd.DataFrame(trows("q1/t0/c0", "searcher", [-1.0], [-3.0], [1])
                     + trows("q1/t0/c9/k0", "answerer", [-1.0], [-3.0], [1]))
    out = compute_rewards(s, t, "c_mas_rl", REWARDS)
    assert out["reward"].tolist() == pytest.approx([0.9 + 0.05, 1.0])
    assert out["kl_to_teacher"].isna().all()
    with pytest.raises(InputError, match="workflow"):
        compute_rewards(s, t, "multiagent_opd", REWARDS)
    with pytest.raises(InputError, match="expected a trained system"):
        compute_rewards(s, t, "grpo", REWARDS)
    with pytest.raises(InputError, match="golden_answers"):
        compute_rewards(s.drop(columns="golden_answers"), t, "c_mas_rl", REWARDS)


def test_compute_rewards_opd_requires_the_teacher():
    s, t = _hierarchy_batch()
    with pytest.raises(InputError, match="teacher_logp"):
        compute_rewards(s, t.assign(teacher_logp=np.nan), "multiagent_opd", REWARDS)


def test_leader_reward_rejects_c_tool_that_varies_inside_a_trajectory():
    s = pd.DataFrame([srow("a0", "leader", "q1/t0", c_tool=1, r_em=1.0),
                      srow("a1", "leader", "q1/t0", c_tool=2, r_em=1.0)])
    with pytest.raises(InputError, match="c_tool"):
        leader_reward(s, REWARDS)


# ---- every reward number comes from params.yaml ---------------------------------------------------


def _stage1_batch() -> tuple[pd.DataFrame, pd.DataFrame]:
    s = pd.DataFrame([
        srow("q1/t0/c0", "searcher", n_search=1, reported=True, workflow="cascade"),
        srow("q1/t1/c0", "searcher", "q1/t1", n_search=1, reported=True, malformed=True, workflow="cascade"),
        cand("q1/t0", 0, "Paris", workflow="cascade"), cand("q1/t1", 0, "Rome", workflow="cascade"),
    ])
    t = pd.DataFrame(trows("q1/t0/c0", "searcher", [-1.0], [-1.0], [1])
                     + trows("q1/t1/c0", "searcher", [-1.0], [-1.0], [1])
                     + trows("q1/t0/c9/k0", "answerer", [-1.0], [-1.0], [1])
                     + trows("q1/t1/c9/k0", "answerer", [-1.0], [-1.0], [1]))
    return s, t


def _kl(s: pd.DataFrame, t: pd.DataFrame, sample_id: str) -> float:
    """old - teacher summed over the sample's loss tokens."""
    tok = t[(t["sample_id"] == sample_id) & (t["loss_mask"] == 1)]
    return float((tok["old_logp"] - tok["teacher_logp"]).sum())


def _expected(w, field: str) -> tuple[str, str, float]:
    """(mode, sample_id, expected reward) that shows `field` of the weights `w` at work."""
    s, t = _hierarchy_batch()
    answerer_kl = _kl(s, t, "q1/t0/c9/k0")
    leader = (w.leader_em_weight * 1.0 + w.assign_weight * min(2, w.c_tool_cap) / w.c_tool_cap
              - w.kl_coef * _kl(s, t, "q1/t0/c0"))
    return {
        "searcher_em_weight": ("c_mas_rl", "q1/t0/c0", w.searcher_em_weight * 1.0 + w.behaviour_weight * 0.5),
        "behaviour_weight": ("c_mas_rl", "q1/t0/c0", w.searcher_em_weight * 1.0 + w.behaviour_weight * 0.5),
        "malformed_reward": ("c_mas_rl", "q1/t1/c0", w.malformed_reward),
        "leader_em_weight": ("prompted_critic", "q1/t0/c0", leader),
        "assign_weight": ("prompted_critic", "q1/t0/c0", leader),
        "c_tool_cap": ("prompted_critic", "q1/t0/c0", leader),
        "critic_em_weight": ("prompted_critic", "q1/t0/c1",
                             w.critic_em_weight * 1.0 + (1 - w.critic_em_weight) * 4.0 / 10),
        "kl_coef": ("multiagent_opd", "q1/t0/c9/k0", 1.0 - w.kl_coef * answerer_kl),
    }[field]


@pytest.mark.parametrize("field", list(type(REWARDS).model_fields))
def test_every_reward_number_is_read_from_the_params(field):
    """Change one number of common.rewards: the reward moves exactly as the formula says."""
    current = getattr(REWARDS, field)
    bumped = REWARDS.model_copy(update={field: (current + 1 if isinstance(current, int) else current * 0.5 + 0.01)
                                        if field != "c_tool_cap" else 1})
    for weights in (REWARDS, bumped):
        mode, sample_id, expected = _expected(weights, field)
        s, t = _stage1_batch() if mode == "c_mas_rl" else _hierarchy_batch()
        out = compute_rewards(s, t, mode, weights)
        value = out.set_index("sample_id").loc[sample_id, "reward"]
        assert value == pytest.approx(expected, abs=1e-12), (field, weights)
    assert _expected(bumped, field)[2] != pytest.approx(_expected(REWARDS, field)[2])


def test_outcome_is_the_reward_before_bonus_and_kl():
    """samples.outcome: the Leader's R_EM (malformed -1) without the assignment bonus; every other
    role's reward before the KL term."""
    from pipeline.rl.rewards import tie_outcome

    s = pd.DataFrame([
        srow("a0", "leader", "q1/t0", c_tool=4, r_em=1.0), srow("b0", "leader", "q1/t1", c_tool=1, r_em=0.0),
        srow("c0", "leader", "q1/t2", c_tool=2, r_em=1.0), srow("c1", "leader", "q1/t2", c_tool=2, r_em=1.0,
                                                                  malformed=True),
    ])
    out = tie_outcome(leader_reward(s, REWARDS), REWARDS)
    assert out["outcome"].tolist() == [1.0, 0.0, -1.0, -1.0]
    assert out["reward"].tolist()[:2] == pytest.approx([0.9 + 0.1 * 4 / 6, 0.1 * 1 / 6])

    s, t = _hierarchy_batch()
    out = compute_rewards(s, t, "multiagent_opd", REWARDS).set_index("sample_id")
    assert out.loc["q1/t0/c0", "outcome"] == 1.0  # R_EM, not 0.9 + bonus - KL
    assert out.loc[["q1/t0/c9/k0", "q1/t0/c9/k1"], "outcome"].tolist() == [1.0, 0.0]  # c_ij, no KL
    assert math.isnan(out.loc["q1/t0/c1", "outcome"])  # OPD Searchers: no scalar reward
    critic = compute_rewards(s, t, "prompted_critic", REWARDS).set_index("sample_id")
    assert critic.loc["q1/t0/c1", "outcome"] == critic.loc["q1/t0/c1", "reward"]  # no KL on Searchers


def test_stage1_searcher_reward_on_its_own_report():
    """searcher_outcome "report": the Searcher's own outcome is whether its report holds a gold alias
    (whole words, EM-normalised), whatever the team's EM; the search bonus and malformed rule as the paper's."""
    s = pd.DataFrame([
        srow("a", "searcher", "q1/t0", n_search=1, reported=True, r_em=0.0, report="It is the City-of light.",
             workflow="cascade"),
        srow("b", "searcher", "q1/t1", n_search=2, reported=True, r_em=1.0, report="Parisian cafes",
             workflow="cascade"),
        srow("c", "searcher", "q1/t2", n_search=1, reported=True, r_em=1.0, report="paris", malformed=True,
             workflow="cascade"),
        srow("d", "answerer", "q1/t0", r_em=1.0, workflow="cascade"),
    ])
    out = searcher_stage1_reward(s, REWARDS, "report")
    assert out["report_held"].tolist()[:3] == [0.0, 0.0, 1.0]  # "cityoflight" is no alias; "parisian" no word
    s.loc[0, "report"] = "It is the City of Light."
    out = searcher_stage1_reward(s, REWARDS, "report")
    assert out["report_held"].tolist()[:3] == [1.0, 0.0, 1.0] and math.isnan(out["report_held"].iloc[3])
    assert out["reward"].tolist()[:3] == pytest.approx([0.9 + 0.05, 0.1, -1.0])
    team = searcher_stage1_reward(s, REWARDS, "team")
    assert team["reward"].tolist()[:2] == pytest.approx([0.05, 0.9 + 0.1])
    with pytest.raises(InputError, match="searcher_outcome"):
        searcher_stage1_reward(s, REWARDS, "judge")
