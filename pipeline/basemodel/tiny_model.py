"""The tiny profile's model: a small Qwen3 built from scratch around our own tokenizer."""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase, Qwen3Config, Qwen3ForCausalLM

from pipeline.errors import InputError


def build_tiny_qwen3(
    tokenizer: PreTrainedTokenizerBase,
    hidden_size: int = 192,
    num_layers: int = 3,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 512,
    max_position_embeddings: int = 1024,
    seed: int = 0,
) -> Qwen3ForCausalLM:
    """A randomly initialised Qwen3 with tied embeddings sized to `tokenizer`.

    The defaults give the ~1.8M-parameter model of the sizing data point
    (with a 3,000-token vocabulary).
    """
    if hidden_size % num_heads:
        raise InputError(f"hidden_size: expected a multiple of num_heads={num_heads}, got {hidden_size}")
    if num_heads % num_kv_heads:
        raise InputError(f"num_kv_heads: expected a divisor of num_heads={num_heads}, got {num_kv_heads}")
    if tokenizer.eos_token_id is None:
        raise InputError("tokenizer: expected an eos token, found none")
    config = Qwen3Config(
        vocab_size=len(tokenizer),
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        head_dim=hidden_size // num_heads,
        max_position_embeddings=max_position_embeddings,
        tie_word_embeddings=True,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        dtype="float32",
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config.pad_token_id = tokenizer.pad_token_id
    model.generation_config.eos_token_id = tokenizer.eos_token_id
    model.generation_config.bos_token_id = tokenizer.bos_token_id
    return model


def count_parameters(model: torch.nn.Module) -> int:
    """Unique trainable parameters (tied embeddings counted once)."""
    return sum(p.numel() for p in model.parameters())
