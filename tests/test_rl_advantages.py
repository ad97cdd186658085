"""Role-scoped GRPO, Searcher OPD and the registered verl estimator on hand-made tables."""

from __future__ import annotations

import statistics

import numpy as np
import pandas as pd
import pytest
import torch
from verl.trainer.ppo.core_algos import compute_grpo_outcome_advantage, get_adv_estimator_fn

from pipeline.errors import InputError
from pipeline.rl.advantages import (
    ESTIMATOR_NAME,
    compute_advantages,
    estimator_inputs,
    grpo_unit_advantage,
    grpo_units,
)
from pipeline.rl.batch import unpad
from pipeline.rl.rewards import compute_rewards
from pipeline.systems import BY_NAME as MODES
from tests.helpers.configs import OPD_BETA, REWARDS

EPS = 1e-6
BETA = OPD_BETA


def grpo_by_hand(rewards: list[float]) -> list[float]:
    mean, std = statistics.mean(rewards), statistics.stdev(rewards)
    return [(r - mean) / (std + EPS) for r in rewards]


def srow(sample_id: str, role: str, traj: str, reward: float, r_em: float = 0.0, **kw) -> dict:
    row = dict(sample_id=sample_id, question_id=traj.split("/")[0], trajectory_id=traj, workflow="hierarchy",
               role=role, request_id="", reward=reward, r_em=r_em)
    row.update(kw)
    return row


def trows(sample_id: str, role: str, mask: list[int], old: list[float] | None = None,
          teacher: list[float] | None = None) -> list[dict]:
    old = old or [-1.0] * len(mask)
    teacher = teacher or [-1.0] * len(mask)
    return [dict(sample_id=sample_id, pos=i, role=role, loss_mask=m, old_logp=o, teacher_logp=t, advantage=0.0)
            for i, (m, o, t) in enumerate(zip(mask, old, teacher))]


def adv_of(tokens: pd.DataFrame, sample_id: str) -> list[float]:
    return tokens.loc[tokens["sample_id"] == sample_id, "advantage"].tolist()


def test_grpo_matches_the_formula_with_unbiased_std():
    rewards = [1.0, 0.0, 0.0, 1.0, 1.0, 0.3, 0.9]
    index = np.array(["a"] * 5 + ["b"] * 2, dtype=object)
    expected = grpo_by_hand(rewards[:5]) + grpo_by_hand(rewards[5:])
    assert grpo_unit_advantage(np.array(rewards), index) == pytest.approx(expected, rel=1e-9)


@pytest.mark.parametrize("value", [0.95, 0.9 + 0.1 * 5 / 6, 1 / 3, -1.0])
def test_equal_reward_groups_get_exactly_zero(value):
    # in float32 verl gives 5 x (0.9 + 0.1*5/6) an advantage of about -0.056 each
    adv = grpo_unit_advantage(np.full(7, value), np.array(["g"] * 7, dtype=object))
    assert (adv == 0.0).all()


def test_singleton_group_follows_verl_mean_0_std_1():
    adv = grpo_unit_advantage(np.array([0.7, 1.0, 0.0]), np.array(["solo", "pair", "pair"], dtype=object))
    assert adv[0] == pytest.approx(0.7 / (1 + EPS), rel=1e-7)  # verl keeps mean 0 / std 1 in float32
    assert adv[1:] == pytest.approx(grpo_by_hand([1.0, 0.0]))


def test_leader_groups_count_one_reward_per_trajectory_on_every_leader_token():
    # trajectory t0 has three Leader calls; counting calls would weight its reward 3x
    traj_rewards = {"q1/t0": 1.0, "q1/t1": 0.0, "q1/t2": 0.0}
    calls = {"q1/t0": 3, "q1/t1": 1, "q1/t2": 2}
    s = pd.DataFrame([srow(f"{t}/c{c}", "leader", t, r) for t, r in traj_rewards.items() for c in range(calls[t])])
    tok = pd.DataFrame([r for sid in s["sample_id"] for r in trows(sid, "leader", [1, 1, 0])])
    out = compute_advantages(s, tok, "ablation_no_searcher_supervision", BETA)
    expected = dict(zip(traj_rewards, grpo_by_hand(list(traj_rewards.values()))))
    for sid, traj in zip(s["sample_id"], s["trajectory_id"]):
        assert adv_of(out, sid) == pytest.approx([expected[traj], expected[traj], 0.0])
        assert adv_of(out, sid)[2] == 0.0


def test_answerer_groups_are_per_request_and_never_mix_workflows():
    s = pd.DataFrame([
        srow("c/k0", "answerer", "q1/t0", 1.0, workflow="cascade", request_id="q1/t0/a0"),
        srow("c/k1", "answerer", "q1/t0", 0.0, workflow="cascade", request_id="q1/t0/a0"),
        srow("h/k0", "answerer", "q1/t0", 1.0, request_id="q1/t0/a0"),
        srow("h/k1", "answerer", "q1/t0", 1.0, request_id="q1/t0/a0"),
        srow("r/k0", "answerer", "q1/t1", 0.0, request_id="q1/t1/a0"),
        srow("r/k1", "answerer", "q1/t1", 1.0, request_id="q1/t1/a0"),
        srow("r/k2", "answerer", "q1/t1", 1.0, request_id="q1/t1/a0"),
    ])
    tok = pd.DataFrame([r for sid in s["sample_id"] for r in trows(sid, "answerer", [1])])
    adv = compute_advantages(s, tok, "multiagent_opd", BETA).set_index("sample_id")["advantage"]
    assert adv[["c/k0", "c/k1"]].tolist() == pytest.approx(grpo_by_hand([1.0, 0.0]))
    assert adv[["h/k0", "h/k1"]].tolist() == [0.0, 0.0]  # had the workflows mixed, these would not be 0
    assert adv[["r/k0", "r/k1", "r/k2"]].tolist() == pytest.approx(grpo_by_hand([0.0, 1.0, 1.0]))
    units = grpo_units(s, MODES["multiagent_opd"])
    group = dict(zip(s["sample_id"], units.group[units.row_unit]))
    assert group["c/k0"] == group["c/k1"] != group["h/k0"] == group["h/k1"] != group["r/k0"]


def test_opd_sign_scale_and_masked_tokens():
    s = pd.DataFrame([srow("S", "searcher", "q1/t0", np.nan)])
    tok = pd.DataFrame(trows("S", "searcher", [1, 0, 1], old=[-2.0, -0.5, -0.1], teacher=[-0.1, np.nan, -3.0]))
    out = compute_advantages(s, tok, "multiagent_opd", beta=0.01)
    a = adv_of(out, "S")
    assert a[0] == pytest.approx(0.01 * (-0.1 + 2.0)) and a[0] > 0  # Teacher more confident -> positive
    assert a[1] == 0.0  # observation token, even with no Teacher score
    assert a[2] == pytest.approx(0.01 * (-3.0 + 0.1)) and a[2] < 0
    with pytest.raises(InputError, match="teacher_logp"):
        compute_advantages(s, tok.assign(teacher_logp=np.nan), "multiagent_opd", BETA)


def test_no_searcher_supervision_zeroes_searcher_mask_and_advantage():
    s = pd.DataFrame([srow("S", "searcher", "q1/t0", np.nan), srow("L", "leader", "q1/t0", 1.0)])
    tok = pd.DataFrame(trows("S", "searcher", [1, 1], teacher=[-0.1, -0.1]) + trows("L", "leader", [1]))
    out = compute_advantages(s, tok, "ablation_no_searcher_supervision", BETA)
    searcher = out[out["sample_id"] == "S"]
    assert searcher["loss_mask"].tolist() == [0, 0] and searcher["advantage"].tolist() == [0.0, 0.0]


def test_outcome_rl_searcher_uses_r_em_over_all_trajectories_of_the_question():
    r_em = {"q1/t0": 1.0, "q1/t1": 0.0, "q1/t2": 1.0, "q1/t3": 0.0}
    s = pd.DataFrame(
        [srow(f"{t}/c0", "leader", t, 0.5, r) for t, r in r_em.items()]
        + [srow("q1/t0/c1", "searcher", "q1/t0", 1.0, 1.0), srow("q1/t0/c2", "searcher", "q1/t0", 1.0, 1.0),
           srow("q1/t1/c1", "searcher", "q1/t1", 0.0, 0.0)]  # t2 and t3 ran no Searcher
    )
    tok = pd.DataFrame([r for sid, role in zip(s["sample_id"], s["role"]) for r in trows(sid, role, [1, 0])])
    out = compute_advantages(s, tok, "ablation_outcome_rl_searcher", BETA)
    expected = dict(zip(r_em, grpo_by_hand(list(r_em.values()))))
    assert adv_of(out, "q1/t0/c1") == pytest.approx([expected["q1/t0"], 0.0])
    assert adv_of(out, "q1/t0/c2") == pytest.approx([expected["q1/t0"], 0.0])
    assert adv_of(out, "q1/t1/c1") == pytest.approx([expected["q1/t1"], 0.0])


def test_prompted_critic_groups_all_searcher_samples_of_a_question():
    rewards = [0.85, 0.5, -1.0, 0.2]
    s = pd.DataFrame([srow(f"q1/t{i % 2}/c{i}", "searcher", f"q1/t{i % 2}", r) for i, r in enumerate(rewards)])
    tok = pd.DataFrame([r for sid in s["sample_id"] for r in trows(sid, "searcher", [1])])
    out = compute_advantages(s, tok, "prompted_critic", BETA)
    assert out["advantage"].tolist() == pytest.approx(grpo_by_hand(rewards))


def test_missing_reward_for_a_grpo_role_raises():
    s = pd.DataFrame([srow("A", "answerer", "q1/t0", np.nan, request_id="q1/t0/a0")])
    with pytest.raises(InputError, match="reward"):
        compute_advantages(s, pd.DataFrame(trows("A", "answerer", [1])), "multiagent_opd", BETA)


# ---- the registered verl estimator equals the table path -------------------------------------

def random_batch(seed: int, workflow: str = "hierarchy") -> tuple[pd.DataFrame, pd.DataFrame]:
    """Two questions x 5 trajectories, contract columns, random outputs and log-probs."""
    rng = np.random.default_rng(seed)
    samples, tokens = [], []
    c_tool = {f"q{i}/t{k}": int(rng.integers(0, 10)) for i in range(2) for k in range(5)}

    def add(sample_id, role, traj, n_gen, n_obs=0, **kw):
        base = dict(sample_id=sample_id, question_id=traj.split("/")[0], trajectory_id=traj, workflow=workflow,
                    role=role, call_id=0, agent_id=role, request_id="", candidate_id=-1,
                    malformed=bool(rng.random() < 0.1), n_search=int(rng.integers(0, 4)),
                    reported=bool(rng.random() < 0.8), answer="",
                    golden_answers=["paris"], c_tool=c_tool[traj], is_final_request=False,
                    judge_score=float(rng.integers(0, 11)))
        base.update(kw)
        samples.append(base)
        kinds = ["generated"] * n_gen + ["observation"] * n_obs
        for pos, kind in enumerate(rng.permutation(kinds)):
            gen = kind == "generated"
            tokens.append(dict(sample_id=sample_id, pos=pos, token_id=pos, role=role, source=kind, loss_mask=int(gen),
                               old_logp=float(-rng.exponential()) if gen else 0.0,
                               teacher_logp=float(-rng.exponential()) if gen else np.nan, advantage=0.0))

    for q in ("q0", "q1"):
        for k in range(5):
            traj = f"{q}/t{k}"
            if workflow == "hierarchy":
                for c in range(int(rng.integers(1, 4))):
                    add(f"{traj}/c{c}", "leader", traj, int(rng.integers(1, 5)))
                n_searchers = int(rng.integers(0, 4))
            else:
                n_searchers = 1
            for c in range(n_searchers):
                add(f"{traj}/c{10 + c}", "searcher", traj, int(rng.integers(1, 5)), int(rng.integers(0, 4)))
            for j in range(5):
                add(f"{traj}/c20/k{j}", "answerer", traj, int(rng.integers(1, 4)), request_id=f"{traj}/a0",
                    candidate_id=j, is_final_request=True, answer=str(rng.choice(["paris", "lyon", ""])))
    return pd.DataFrame(samples), pd.DataFrame(tokens)


def oracle_advantages(samples: pd.DataFrame, tokens: pd.DataFrame, mode: str, beta: float) -> np.ndarray:
    """The advantages of docs/method.md §5, computed independently of the product: per role, verl's GRPO in
    float64 over string group keys "role|workflow|scope id" with one reward per unit (ties -> 0),
    or beta * (teacher - old) for OPD; 0 off the loss mask and on untrained roles."""
    role_of = samples.set_index("sample_id")["role"]
    token_role = tokens["sample_id"].map(role_of).to_numpy()
    mask = tokens["loss_mask"].to_numpy() > 0
    expected = np.zeros(len(tokens))
    for role, policy in MODES[mode].roles.items():
        on = (token_role == role) & mask
        if policy.kind == "opd":
            expected[on] = beta * (tokens["teacher_logp"].to_numpy()[on] - tokens["old_logp"].to_numpy()[on])
        elif policy.kind == "grpo":
            rows = samples if policy.reward_column == "r_em" else samples[samples["role"] == role]
            scope = {"question": "question_id", "request": "request_id"}[policy.scope]
            unit = {"trajectory": "trajectory_id", "sample": "sample_id"}[policy.unit]
            units = rows.assign(key=role + "|" + rows["workflow"] + "|" + rows[scope]).groupby(unit, sort=False).agg(
                key=("key", "first"), reward=(policy.reward_column, "first"))
            scores = torch.tensor(units["reward"].to_numpy(dtype=np.float64)).unsqueeze(-1)
            adv, _ = compute_grpo_outcome_advantage(scores, torch.ones_like(scores), units["key"].to_numpy(), EPS)
            adv = pd.Series(adv.squeeze(-1).numpy(), index=units.index)
            tied = units.groupby("key")["reward"].transform(lambda r: (r.max() == r.min()) and len(r) > 1)
            adv[tied.astype(bool).to_numpy()] = 0.0
            unit_of_sample = samples.set_index("sample_id")[unit] if unit != "sample_id" else None
            sample_ids = tokens.loc[on, "sample_id"]
            expected[on] = ((sample_ids if unit_of_sample is None else sample_ids.map(unit_of_sample))
                            .map(adv).to_numpy())
    return expected


@pytest.mark.parametrize(
    "mode, workflow, seed",
    [("multiagent_opd", "hierarchy", 0), ("multiagent_opd", "hierarchy", 1), ("ablation_base_teacher", "hierarchy", 2),
     ("prompted_critic", "hierarchy", 3), ("ablation_no_searcher_supervision", "hierarchy", 4),
     ("c_mas_rl", "cascade", 5), ("ablation_outcome_rl_searcher", "hierarchy", 7)],
)
def test_registered_estimator_equals_an_independent_oracle(mode, workflow, seed):
    samples, tokens = random_batch(seed, workflow)
    samples = compute_rewards(samples, tokens, mode, REWARDS)
    kwargs = estimator_inputs(samples, tokens, mode, BETA)
    adv, returns = get_adv_estimator_fn(ESTIMATOR_NAME)(**kwargs)
    ids = samples["sample_id"].to_numpy(dtype=object)
    expected = oracle_advantages(samples, tokens, mode, BETA)
    assert unpad(tokens, ids, adv) == pytest.approx(expected, abs=1e-12)
    assert torch.equal(adv, returns)
    table = compute_advantages(samples, tokens, mode, BETA)
    assert table["advantage"].to_numpy() == pytest.approx(expected, abs=1e-12)
    assert (table.loc[table["loss_mask"] == 0, "advantage"] == 0.0).all()
    assert (table["advantage"] != 0).sum() > 0


def test_registered_estimator_in_float32_keeps_equal_groups_at_zero():
    samples, tokens = random_batch(6)
    samples = compute_rewards(samples, tokens, "multiagent_opd", REWARDS)
    kwargs = estimator_inputs(samples, tokens, "multiagent_opd", BETA)
    kwargs = {k: (v.float() if isinstance(v, torch.Tensor) else v) for k, v in kwargs.items()}
    adv, _ = get_adv_estimator_fn(ESTIMATOR_NAME)(**kwargs)
    table = compute_advantages(samples, tokens, "multiagent_opd", BETA)
    ids = samples["sample_id"].to_numpy(dtype=object)
    assert unpad(tokens, ids, adv) == pytest.approx(table["advantage"].to_numpy(), abs=1e-5)
    assert adv.dtype == torch.float32


def _tied_leader_batch() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Question q1: three trajectories with equal R_EM whose rewards differ by the assignment
    bonus and KL; question q2: R_EM differs."""
    rows = [srow("q1/t0/c0", "leader", "q1/t0", 0.9 + 0.1 * 2 / 6 - 1e-3, r_em=1.0, outcome=1.0),
            srow("q1/t1/c0", "leader", "q1/t1", 0.9 + 0.1 * 5 / 6 - 2e-3, r_em=1.0, outcome=1.0),
            srow("q1/t2/c0", "leader", "q1/t2", 0.9 + 0.1 * 1 / 6, r_em=1.0, outcome=1.0),
            srow("q2/t0/c0", "leader", "q2/t0", 0.9 + 0.1 * 2 / 6, r_em=1.0, outcome=1.0),
            srow("q2/t1/c0", "leader", "q2/t1", 0.1 * 3 / 6, r_em=0.0, outcome=0.0)]
    s = pd.DataFrame(rows)
    tok = pd.DataFrame([r for sid in s["sample_id"] for r in trows(sid, "leader", [1, 1])])
    return s, tok


def test_tie_on_outcome_zeroes_groups_tied_before_bonus_and_kl():
    s, tok = _tied_leader_batch()
    by_reward = compute_advantages(s, tok, "ablation_no_searcher_supervision", BETA, "reward")
    by_outcome = compute_advantages(s, tok, "ablation_no_searcher_supervision", BETA, "outcome")
    q1 = [f"q1/t{k}/c0" for k in range(3)]
    # on rewards, bonus and KL noise become advantages of about +-1 in a group tied on R_EM
    assert max(abs(adv_of(by_reward, sid)[0]) for sid in q1) > 0.5
    assert all(adv_of(by_outcome, sid) == [0.0, 0.0] for sid in q1)
    # a group whose outcomes differ keeps verl's GRPO advantages of its rewards under both rules
    expected = grpo_by_hand([0.9 + 0.1 * 2 / 6, 0.1 * 3 / 6])
    for sid, value in zip(["q2/t0/c0", "q2/t1/c0"], expected):
        assert adv_of(by_outcome, sid) == pytest.approx([value, value]) == adv_of(by_reward, sid)


def test_tie_on_outcome_needs_the_outcome_column_and_a_known_rule():
    s, tok = _tied_leader_batch()
    with pytest.raises(InputError, match="samples.outcome"):
        compute_advantages(s.drop(columns="outcome"), tok, "ablation_no_searcher_supervision", BETA, "outcome")
    with pytest.raises(InputError, match="tie_on: expected one of"):
        compute_advantages(s, tok, "ablation_no_searcher_supervision", BETA, "sign")
    # "reward" reads no outcome: tables from before the column still work
    compute_advantages(s.drop(columns="outcome"), tok, "ablation_no_searcher_supervision", BETA, "reward")


def test_diagnostics_show_ties_broken_by_bonus_and_kl():
    from pipeline.rl.diagnostics import advantage_diagnostics
    from pipeline.systems import trained_system

    s, tok = _tied_leader_batch()
    s = s.assign(n_search=0)
    system = trained_system("ablation_no_searcher_supervision")
    for tie_on, zero in (("reward", 0.0), ("outcome", 0.5)):
        out = compute_advantages(s, tok, system, BETA, tie_on)
        d = advantage_diagnostics(s, out, system, tie_on)
        assert d["tied_groups_leader"] == 0.5  # q1 of {q1, q2} is tied on R_EM
        assert d["zero_adv_groups_leader"] == zero
