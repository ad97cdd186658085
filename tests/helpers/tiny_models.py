"""A very small in-process backend for the policy tests: a BPE tokenizer over syllable text and
a two-layer Qwen3 with random weights."""

from __future__ import annotations

import random

from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.policy.hf_backend import HFBackend


def tiny_hf_backend(num_kv_heads: int, max_positions: int, **backend_kwargs) -> HFBackend:
    rng = random.Random(1)
    syllables = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi"]
    texts = [" ".join(rng.choice(syllables) + rng.choice(syllables) for _ in range(10)) + "." for _ in range(200)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=400)
    model = build_tiny_qwen3(tokenizer, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=num_kv_heads,
                             intermediate_size=96, max_position_embeddings=max_positions, seed=0).eval()
    return HFBackend(model, tokenizer, **backend_kwargs)
