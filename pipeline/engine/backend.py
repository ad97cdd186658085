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

from pipeline.engine.engine import Engine, EngineConfig
from pipeline.engine.qwen3 import Qwen3Weights
from pipeline.engine.teacher_forcing import score_pairs
from pipeline.errors import InputError
from pipeline.policy.base import Generation, SamplingParams
from pipeline.policy.encoding import truncate_left
from pipeline.policy.hf_backend import HFBackend, validate_sampling
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
        validate_sampling(params, n)
        if not self.engine.idle:
            raise RuntimeError("engine: generate called while a rollout is running on it")
        if params.max_new_tokens >= self.max_context:
            raise InputError(f"max_new_tokens: expected < the model's context {self.max_context}, "
                             f"got {params.max_new_tokens}")
        budgets = params.row_max_new_tokens
        if budgets is not None and len(budgets) != len(prompts):
            raise InputError(f"row_max_new_tokens: expected one per prompt ({len(prompts)}), got {len(budgets)}")
        seeds = sample_seeds(params, len(prompts), n)
        for i, prompt in enumerate(prompts):
            budget = params.max_new_tokens if budgets is None else min(budgets[i], params.max_new_tokens)
            prompt = truncate_left(prompt, self.max_context - params.max_new_tokens)
            for j in range(n):
                self.engine.submit((i, j), prompt, budget, temperature=params.temperature, top_p=params.top_p,
                                   stop=params.stop, seed=None if seeds is None else seeds[i * n + j])
        done = dict(self.engine.run())
        return [[done[(i, j)] for j in range(n)] for i in range(len(prompts))]

    def score(self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]],
              temperature: float = 1.0) -> list[list[float]]:
        if len(prompts) != len(responses):
            raise InputError(f"responses: expected one per prompt ({len(prompts)}), got {len(responses)}")
        if temperature <= 0:
            raise InputError(f"temperature: expected > 0 for scoring, got {temperature}")
        pairs = []
        for i, (prompt, response) in enumerate(zip(prompts, responses)):
            if len(response) >= self.max_context:
                raise InputError(f"responses[{i}]: expected fewer than {self.max_context} tokens, got {len(response)}")
            if len(prompt) == 0:
                raise InputError(f"prompts[{i}]: expected at least one token, got an empty prompt")
            pairs.append((truncate_left(prompt, self.max_context - len(response)), list(response)))
        self.engine.check_weights()
        return score_pairs(self.weights, self.engine.cache, [p for p, _ in pairs], [r for _, r in pairs],
                           temperature, device=self.device, stats=self.engine.stats)
