"""EngineBackend: the PolicyBackend of a model in this process, served by the engine.

`generate` submits every prompt x sample to the engine and steps it until all have ended;
`score` teacher-forces packed pairs with shared prompts computed once. The rollout driver
(pipeline.agents.driver) talks to `engine` directly, so every workflow of a rollout shares one
scheduler. The reference implementation of the same interface, one padded batch per call, is
HFBackend (pipeline.policy.hf_backend), which this class extends for loading and the trainer's
attributes (model, tokenizer, pad_id, max_context, device).
"""

from __future__ import annotations

import os
from collections.abc import Sequence

import torch

from pipeline.engine.base import EngineConfig
from pipeline.engine.engine import Engine
from pipeline.engine.qwen3 import Qwen3Weights
from pipeline.engine.teacher_forcing import score_pairs
from pipeline.policy.base import Generation, SamplingParams, validate_sampling, validate_scoring
from pipeline.policy.encoding import truncate_left
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.sampling_seeds import sample_seeds


class EngineBackend(HFBackend):
    def __init__(self, model_or_path: torch.nn.Module | str | os.PathLike, tokenizer=None,
                 device: str | torch.device = "cpu", dtype: torch.dtype | str | None = None,
                 config: EngineConfig | None = None):
        super().__init__(model_or_path, tokenizer, device=device, dtype=dtype)
        bf16 = config is not None and config.bf16
        self.weights = Qwen3Weights(self.model, torch.bfloat16 if bf16 else None).to(self.device)
        self.engine = Engine(self.weights, self.tokenizer, self.eos_ids, config, self.device)

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
                 ) -> list[list[Generation]]:
        """Every prompt x sample submitted, each with its own budget (prompts are cut to fit by the
        engine), stepped until all have ended."""
        validate_sampling(params, n, len(prompts), self.max_context)
        if not self.engine.idle:
            raise RuntimeError("engine: generate called while a rollout is running on it")
        budgets = params.row_max_new_tokens
        seeds = sample_seeds(params, len(prompts), n)
        for i, prompt in enumerate(prompts):
            budget = params.max_new_tokens if budgets is None else min(budgets[i], params.max_new_tokens)
            for j in range(n):
                self.engine.submit((i, j), prompt, budget, temperature=params.temperature, top_p=params.top_p,
                                   stop=params.stop, seed=None if seeds is None else seeds[i * n + j])
        done = dict(self.engine.run())
        return [[done[(i, j)] for j in range(n)] for i in range(len(prompts))]

    def score(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
              temperature: float = 1.0) -> list[list[float]]:
        validate_scoring(prompts, responses, temperature, self.max_context)
        prompts = [truncate_left(p, self.max_context - len(r)) for p, r in zip(prompts, responses)]
        self.engine.check_weights()
        return score_pairs(self.weights, self.engine.cache, prompts, [list(r) for r in responses],
                           temperature, device=self.device, stats=self.engine.stats)
