"""How far a measured speed is from what this machine's arithmetic allows.

The bound is measured, not looked up: the best of a few square matrix products (1024 x 1024,
torch's own kernels, this process's threads) in float32 and, where the CPU computes it natively,
bfloat16. A model's work per token is counted from its shapes: 2 FLOP per weight of every
linear layer (the tied output layer included) and 4 x hidden x context per layer for attention
(scores and the weighted sum), times 3 for a training pass (forward plus backward).
"""

from __future__ import annotations

import time

import torch

from pipeline.precision import cpu_has_native_bf16

GEMM_SIZE = 1024


def matmul_flops_per_second(dtype: torch.dtype, size: int = GEMM_SIZE, repeats: int = 10) -> float:
    """Best-of-`repeats` FLOP/s of one size x size x size product."""
    a = torch.randn(size, size).to(dtype)
    b = torch.randn(size, size).to(dtype)
    torch.mm(a, b)  # warm-up: kernel selection, page faults
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        torch.mm(a, b)
        best = min(best, time.perf_counter() - start)
    return 2.0 * size**3 / best


def machine_bounds() -> dict[str, float]:
    """{"float32": FLOP/s[, "bfloat16": FLOP/s where native]}, measured now."""
    bounds = {"float32": matmul_flops_per_second(torch.float32)}
    if cpu_has_native_bf16():
        bounds["bfloat16"] = matmul_flops_per_second(torch.bfloat16)
    return bounds


def forward_flops_per_token(model: torch.nn.Module, context: float) -> float:
    """FLOP of one token's forward pass through a Qwen3-shaped model that attends to `context`
    earlier positions (on average): every linear layer's weights, the output layer, attention."""
    config = model.config
    linear = sum(m.weight.numel() for m in model.modules() if isinstance(m, torch.nn.Linear))
    attention = 4 * config.num_hidden_layers * config.num_attention_heads * config.head_dim * context
    return 2.0 * linear + attention


def sequence_flops(model: torch.nn.Module, prompt_lengths: list[int], new_tokens: list[int]) -> float:
    """FLOP of teacher-forcing or generating these sequences: each prompt token attends to half
    its prompt on average, each new token to its prompt and half the new tokens."""
    total = 0.0
    for prompt, new in zip(prompt_lengths, new_tokens):
        total += prompt * forward_flops_per_token(model, prompt / 2)
        total += new * forward_flops_per_token(model, prompt + new / 2)
    return total


def describe(name: str, seconds: float, tokens: int, flops: float, bounds: dict[str, float],
             dtype: str = "float32") -> str:
    """One line: tokens/s, the FLOP/s that work means, and its share of the measured bound."""
    achieved = flops / seconds
    return (f"{name}: {tokens / seconds:,.0f} tok/s, {achieved / 1e9:.2f} GFLOP/s = "
            f"{100 * achieved / bounds[dtype]:.1f}% of the {dtype} matmul bound")


def print_bounds(bounds: dict[str, float]) -> None:
    shown = ", ".join(f"{k} {v / 1e9:.0f} GFLOP/s" for k, v in bounds.items())
    print(f"machine bound (best {GEMM_SIZE}^3 matmul, {torch.get_num_threads()} threads): {shown}")
