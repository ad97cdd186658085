"""Harness of the learning controls (tests/test_learning_controls.py).

A control trains a tiny random Qwen3 with the project's own trainer (`collect_batch` +
`ppo_update`) in a setting where the right direction is known, and measures a quantity that
the training signal must move. The policy stays close to the model's own: `ChoiceBackend`
samples each scripted role's completion among a few candidate completions, half of the time by
the model's sequence probabilities and half of the time uniformly (a random model is
near-deterministic between candidates of different lengths, which would leave GRPO groups tied),
and records the model's own token log-probs; what the model learns changes what it does next
step. Roles listed as `free` sample token by token from the model, unrestricted.

`signals(grpo=..., opd=...)` is the test-only switch: it scales the GRPO or the OPD advantage
(1 as trained, -1 sign-flipped, 0 off) inside pipeline.rl.advantages, where every advantage is made.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

import numpy as np
import pandas as pd
import torch

import pipeline.rl.advantages as advantages
from pipeline.policy.base import Generation, SamplingParams
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.logprobs import pack_prompt_response, response_kl
from pipeline.rl.train_params import TrainConfig
from pipeline.rl.trainer import Batch, TrainInputs, collect_batch, make_optimizer, ppo_update
from tests.helpers.configs import OPD_BETA, OPTIM, REWARDS, TIE_ON, workflow_cfg
from tests.helpers.fakes import FakeRetriever, role_of

Choices = Callable[[str], Sequence[str]]  # decoded context -> candidate completions


class ChoiceBackend(HFBackend):
    """HFBackend that samples scripted roles among candidate completions by the model's own
    sequence probabilities, and `free` roles token by token."""

    def __init__(self, model, tokenizer, choices: Choices, free: Sequence[str] = (), explore: float = 0.5):
        super().__init__(model, tokenizer)
        self.choices, self.free, self.explore = choices, tuple(free), explore

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1) -> list[list[Generation]]:
        contexts = [self.decode(p) for p in prompts]
        free = [i for i, c in enumerate(contexts) if role_of(c) in self.free]
        out: list[list[Generation]] = [[] for _ in prompts]
        if free:
            for i, gens in zip(free, super().generate([prompts[i] for i in free], params, n)):
                out[i] = gens
        rng = np.random.default_rng([params.seed or 0, len(prompts)])
        for i, (prompt, context) in enumerate(zip(prompts, contexts)):
            if i in free:
                continue
            candidates = [self.encode(text) for text in self.choices(context)]
            logps = self.score([prompt] * len(candidates), candidates)
            seq = np.array([sum(lp) for lp in logps])
            probs = np.exp(seq - seq.max())
            probs = (1 - self.explore) * probs / probs.sum() + self.explore / len(candidates)
            picks = rng.choice(len(candidates), size=n, p=probs)
            out[i] = [Generation(list(candidates[k]), list(logps[k]), self.decode(candidates[k]), "stop")
                      for k in picks]
        return out


@contextlib.contextmanager
def signals(grpo: float = 1.0, opd: float = 1.0) -> Iterator[None]:
    """Scale (1: as trained, -1: sign-flipped, 0: off) the GRPO and OPD advantages."""
    grpo_fn, opd_fn = advantages.grpo_unit_advantage, advantages.opd_advantage
    advantages.grpo_unit_advantage = lambda *a, **k: grpo * grpo_fn(*a, **k)
    advantages.opd_advantage = lambda *a, **k: opd * opd_fn(*a, **k)
    try:
        yield
    finally:
        advantages.grpo_unit_advantage, advantages.opd_advantage = grpo_fn, opd_fn


def control_config(mode: str, *, lr: float, questions: int = 4, trajectories: int = 4, candidates: int = 4,
                   seed: int = 0, **rollout) -> TrainConfig:
    sampling = dict(top_k=2, n_candidates=candidates, max_searcher_turns=3, leader_max_new_tokens=48,
                    searcher_max_new_tokens=32, answerer_max_new_tokens=16, temperature=1.0, top_p=1.0)
    cfg = workflow_cfg(**{**sampling, **rollout})
    return TrainConfig(
        system=mode, steps=1, seed=seed, questions_per_batch=questions, oversample=1, searcher_outcome="team",
        trajectories_per_question=trajectories,
        lr=lr, entropy_coef=0.0, eval_every=1_000, dev_questions=1, checkpoint_every=1_000, audit_every=1_000,
        judge_max_new_tokens=8, rollout=cfg, dev_rollout=replace(cfg, n_candidates=1), optim=OPTIM, rewards=REWARDS,
        reference_seed=0, opd_beta=OPD_BETA, tie_on=TIE_ON,
    )


def questions(n: int, gold: str = "paris") -> pd.DataFrame:
    return pd.DataFrame({
        "id": [f"q{i}" for i in range(n)],
        "question": [f"what is the capital of place {i}?" for i in range(n)],
        "golden_answers": [[gold] for _ in range(n)],
        "dataset": ["nq"] * n,
    })


def train_steps(cfg: TrainConfig, inputs: TrainInputs, steps: int,
                on_batch: Callable[[Batch], None] | None = None) -> None:
    """`steps` steps of the project's trainer: rollout, rewards, advantages, one PPO pass."""
    optimizer = make_optimizer(inputs.policy.model, cfg)
    for step in range(steps):
        batch = collect_batch(cfg, inputs, step)
        if on_batch is not None:
            on_batch(batch)
        ppo_update(inputs.policy.model, optimizer, inputs.policy, batch, cfg, seed=step)


def make_inputs(policy: HFBackend, train: pd.DataFrame, teacher=None, judge=None) -> TrainInputs:
    return TrainInputs(policy=policy, retriever=FakeRetriever(), train_questions=train, dev_questions=train.head(1),
                       teacher=teacher, judge=judge)


def completion_logp(backend: HFBackend, contexts: Sequence[str], completion: str) -> float:
    """Mean over `contexts` of log p_model(completion | context) (teacher-forced, summed over tokens)."""
    prompts = [backend.encode_prompt(c) for c in contexts]
    ids = backend.encode(completion)
    return float(np.mean([sum(lp) for lp in backend.score(prompts, [ids] * len(prompts))]))


def sequence_kl(student: torch.nn.Module, teacher: torch.nn.Module, prompts: Sequence[Sequence[int]],
                responses: Sequence[Sequence[int]], pad_id: int) -> float:
    """Token mean over the response positions of KL(student(.|h_t) || teacher(.|h_t)), full vocabulary."""
    batch = pack_prompt_response(prompts, responses, pad_id)
    kl = response_kl(student, teacher, batch)
    return float(kl[batch.response_mask.bool()].mean())
