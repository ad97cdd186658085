"""Learning controls: every training signal of the trainer moves a tiny policy the right way, and
its sign-flipped twin moves it the other way (so a sign error anywhere fails here).

Each control runs the project's own trainer (`collect_batch` + `ppo_update`, tests/helpers/controls.py)
on a tiny random Qwen3 in a setting where the right direction is known, and measures the
quantity the signal must move: the log-probability of the rewarded completion against an
unrewarded one on fixed contexts, or the student's KL to the Teacher on fixed contexts. The
switch `signals(...)` flips (or turns off) the GRPO or OPD advantage where it is made.
"""

from __future__ import annotations

import re

import pytest

from pipeline.agents.prompts import ReportLine, load_prompts
from pipeline.policy.base import SamplingParams
from pipeline.policy.hf_backend import HFBackend
from tests.helpers.controls import (
    ChoiceBackend,
    completion_logp,
    control_config,
    make_inputs,
    questions,
    sequence_kl,
    signals,
    train_steps,
)
from tests.helpers.fakes import field_of, role_of
from tests.test_rl_trainer import tiny_model, tiny_tokenizer

PROMPTS = load_prompts()
QUESTIONS = questions(8)
TEXTS = list(QUESTIONS["question"])
REPORT_OK, REPORT_BAD = "<report>paris is the capital</report>", "<report>rome is the capital</report>"


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(autouse=True)
def _one_thread(torch_one_thread):
    yield


def _task(context: str) -> str:
    return field_of(context, "Task")


def _has_report(context: str) -> bool:
    return re.search(r"^R1 \[", context, re.MULTILINE) is not None


def _leader_dispatches_once(context: str) -> list[str]:
    if _has_report(context):
        return ["<answer_with>R1</answer_with>"]
    return [f"<dispatch><task>{field_of(context, 'Question')}</task></dispatch>"]


def _gap(backend, contexts, good: str, bad: str) -> float:
    return completion_logp(backend, contexts, good) - completion_logp(backend, contexts, bad)


# ---- 1. Stage I: outcome GRPO of the Searcher and the Answerer in the cascade ----------------------


def _stage1_choices(context: str) -> list[str]:
    if role_of(context) == "searcher":
        if "<information>" in context:
            return [REPORT_OK]
        return [f"<search>{_task(context)}</search>", "<report>nothing</report>"]
    if "paris" in context:  # the Answerer can be right only when the Searcher searched
        return ["<answer>paris</answer>", "<answer>rome</answer>"]
    return ["<answer>rome</answer>", "<answer>berlin</answer>"]


def test_stage1_outcome_grpo_raises_the_rewarded_answer_and_the_search(tokenizer):
    """Answerer reward = correctness; Searcher reward 0.9 R_EM + 0.1 b_S, and only a Searcher that
    searched lets the Answerer be right. After 4
    steps the right answer gains >= 3 nats on the wrong one and searching gains >= 1 nat on reporting
    at once; the flipped twin loses as much."""
    answerer = [PROMPTS.answerer_prompt(q, [ReportLine("R1", q, "paris is the capital")]) for q in TEXTS]
    searcher = [PROMPTS.searcher_prompt(q) for q in TEXTS]
    moves = {}
    for sign in (1.0, -1.0):
        policy = ChoiceBackend(tiny_model(tokenizer, 0), tokenizer, _stage1_choices)
        before = (_gap(policy, answerer, "<answer>paris</answer>", "<answer>rome</answer>"),
                  _gap(policy, searcher, "<search>", "<report>"))
        with signals(grpo=sign):
            train_steps(control_config("c_mas_rl", lr=3e-3), make_inputs(policy, QUESTIONS), steps=4)
        after = (_gap(policy, answerer, "<answer>paris</answer>", "<answer>rome</answer>"),
                 _gap(policy, searcher, "<search>", "<report>"))
        moves[sign] = (after[0] - before[0], after[1] - before[1])
    assert moves[1.0][0] >= 3.0 and moves[-1.0][0] <= -3.0, moves
    assert moves[1.0][1] >= 1.0 and moves[-1.0][1] <= -1.0, moves


# ---- 2. Stage II: role-scoped GRPO of the Leader (per question) and the Answerer (per request) -----


def _hierarchy_choices(context: str) -> list[str]:
    role = role_of(context)
    if role == "leader":
        if _has_report(context):
            return ["<answer_with>R1</answer_with>"]
        return [f"<dispatch><task>{field_of(context, 'Question')}</task></dispatch>", "<answer_with></answer_with>"]
    if role == "searcher":
        return [REPORT_OK]
    if "paris" in context:  # right only with the report a dispatched Searcher wrote
        return ["<answer>paris</answer>", "<answer>rome</answer>"]
    return ["<answer>rome</answer>", "<answer>berlin</answer>"]


def test_hierarchy_grpo_teaches_the_leader_to_dispatch_and_the_answerer_to_be_right(tokenizer):
    """Leader reward 0.9 R_EM + 0.1 C_tool/6 (one reward per trajectory, grouped by question),
    Answerer reward per candidate grouped by request; only a dispatch brings the report that makes
    the right answer possible. After 4 steps dispatching gains >= 1 nat on answering at once and the
    right answer >= 3 nats on the wrong one; the flipped twin loses as much."""
    leader = [PROMPTS.leader_prompt(q, [], 3) for q in TEXTS]
    answerer = [PROMPTS.answerer_prompt(q, [ReportLine("R1", q, "paris is the capital")]) for q in TEXTS]
    moves = {}
    for sign in (1.0, -1.0):
        policy = ChoiceBackend(tiny_model(tokenizer, 0), tokenizer, _hierarchy_choices)
        teacher = HFBackend(tiny_model(tokenizer, 1), tokenizer)

        def measure(policy=policy):
            return (_gap(policy, leader, "<dispatch>", "<answer_with>"),
                    _gap(policy, answerer, "<answer>paris</answer>", "<answer>rome</answer>"))
        before = measure()
        with signals(grpo=sign):
            train_steps(control_config("ablation_no_searcher_supervision", lr=3e-3),
                        make_inputs(policy, QUESTIONS, teacher), 4)
        after = measure()
        moves[sign] = (after[0] - before[0], after[1] - before[1])
    print("hierarchy GRPO moves", moves)
    assert moves[1.0][0] >= 1.0 and moves[-1.0][0] <= -1.0, moves
    assert moves[1.0][1] >= 3.0 and moves[-1.0][1] <= -3.0, moves


# ---- 3. Stage II: Searcher OPD toward a Teacher ------------------------------------------------------


def _opd_choices(context: str) -> list[str]:
    role = role_of(context)
    if role == "leader":
        return _leader_dispatches_once(context)
    return ["<answer>paris</answer>"]


def _student_samples(policy: HFBackend, contexts: list[str], max_new_tokens: int, seed: int):
    """Fixed contexts for a KL measure: each prompt with one response sampled by the model."""
    prompts = [policy.encode_prompt(c) for c in contexts]
    gens = HFBackend.generate(policy, prompts, SamplingParams(max_new_tokens=max_new_tokens, seed=seed))
    return prompts, [g[0].token_ids for g in gens]


def test_searcher_opd_pulls_the_searcher_toward_the_teacher(tokenizer):
    """OPD alone (GRPO off): Searchers sample freely, every token gets beta * (teacher - old).
    After 8 steps the token-mean KL(student || teacher) on fixed Searcher contexts falls by >= 10%;
    the flipped twin raises it by >= 10%. (The REINFORCE estimate of the KL gradient is noisy: at a
    higher learning rate Adam's steps drown it and the KL rises either way.)"""
    contexts = [PROMPTS.searcher_prompt(q) for q in TEXTS]
    ratios = {}
    for sign in (1.0, -1.0):
        policy = ChoiceBackend(tiny_model(tokenizer, 0), tokenizer, _opd_choices, free=("searcher",))
        teacher = HFBackend(tiny_model(tokenizer, 1), tokenizer)
        prompts, responses = _student_samples(policy, contexts, 24, seed=5)
        before = sequence_kl(policy.model, teacher.model, prompts, responses, policy.pad_id)
        with signals(grpo=0.0, opd=sign):
            train_steps(control_config("multiagent_opd", lr=5e-4, searcher_max_new_tokens=24),
                        make_inputs(policy, QUESTIONS, teacher), 8)
        ratios[sign] = sequence_kl(policy.model, teacher.model, prompts, responses, policy.pad_id) / before
    print("OPD KL ratios", ratios)
    assert ratios[1.0] <= 0.9 and ratios[-1.0] >= 1.1, ratios


# ---- 4. Stage II: the KL-to-Teacher term in the Leader and Answerer rewards --------------------------


def test_kl_in_reward_pulls_the_answerer_toward_the_teacher(tokenizer):
    """Outcomes tied (the gold answer is never written), the Leader's text fixed: the only spread in
    the Answerer's rewards is -kl_coef * sum(old - teacher), which GRPO over 8 candidates turns into
    advantages. After 16 steps the Answerer's token-mean KL(student || teacher) on fixed contexts falls
    by >= 8% (training seeds 0, 1, 2 gave 12%, 21%, 12%; after 8 steps 6%, 9%, 0%, too close); the
    flipped twin raises it by >= 50% (about 10x). Answers are 4 tokens: one reward per sequence
    credits its tokens less well the longer it is, and the estimate gets too noisy otherwise."""
    train = questions(8, gold="zzz")
    contexts = [PROMPTS.answerer_prompt(q, [ReportLine("R1", q, "paris is the capital")]) for q in TEXTS]
    ratios = {}
    for sign in (1.0, -1.0):
        policy = ChoiceBackend(tiny_model(tokenizer, 0), tokenizer,
                               lambda c: _leader_dispatches_once(c) if role_of(c) == "leader" else [REPORT_OK],
                               free=("answerer",))
        teacher = HFBackend(tiny_model(tokenizer, 1), tokenizer)
        prompts, responses = _student_samples(policy, contexts * 4, 4, seed=5)
        before = sequence_kl(policy.model, teacher.model, prompts, responses, policy.pad_id)
        cfg = control_config("ablation_no_searcher_supervision", lr=1e-3, candidates=8, answerer_max_new_tokens=4)
        with signals(grpo=sign):
            train_steps(cfg, make_inputs(policy, train, teacher), 16)
        ratios[sign] = sequence_kl(policy.model, teacher.model, prompts, responses, policy.pad_id) / before
    print("KL-in-reward KL ratios", ratios)
    assert ratios[1.0] <= 0.92 and ratios[-1.0] >= 1.5, ratios


# ---- 5. The Prompted Critic's judge reward ----------------------------------------------------------


def _critic_choices(context: str) -> list[str]:
    role = role_of(context)
    if role == "leader":
        return _leader_dispatches_once(context)
    if role == "searcher":
        if "<information>" in context:
            return [REPORT_OK, REPORT_BAD]
        return [f"<search>{_task(context)}</search>"]
    if role == "judge":  # the judge likes reports that name the capital the passages give
        return ["<score>9</score>" if "Report: paris" in context else "<score>1</score>"]
    return ["<answer>berlin</answer>"]  # outcome tied: R_EM = 0 everywhere


def test_judge_reward_teaches_the_searcher_what_the_judge_scores_high(tokenizer):
    """Searcher reward 0.5 R_EM + 0.5 judge/10 with R_EM tied: GRPO over a question's Searchers
    follows the judge. After 4 steps the report the judge scores 9 gains >= 2 nats on the one it
    scores 1, on fixed post-search contexts; the flipped twin loses as much."""
    contexts = [PROMPTS.searcher_prompt(q) + f"<search>{q}</search>\n<information>Doc 1(Title: Paris) Paris is the "
                "capital of France.</information>\n" for q in TEXTS]
    moves = {}
    for sign in (1.0, -1.0):
        policy = ChoiceBackend(tiny_model(tokenizer, 0), tokenizer, _critic_choices)
        judge = ChoiceBackend(tiny_model(tokenizer, 2), tokenizer, _critic_choices)
        teacher = HFBackend(tiny_model(tokenizer, 1), tokenizer)
        before = _gap(policy, contexts, REPORT_OK, REPORT_BAD)
        with signals(grpo=sign):
            train_steps(control_config("prompted_critic", lr=3e-3), make_inputs(policy, QUESTIONS, teacher, judge), 4)
        moves[sign] = _gap(policy, contexts, REPORT_OK, REPORT_BAD) - before
    print("judge moves", moves)
    assert moves[1.0] >= 2.0 and moves[-1.0] <= -2.0, moves
