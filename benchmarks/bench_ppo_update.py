"""One PPO update (`pipeline.rl.trainer.ppo_update`) on a rollout-shaped batch: length-sorted
micro-batches (gradient accumulation, the trainer's default) against one padded pass per
minibatch (the previous update), with the weights compared, in one run.

The batch has the shape of a tiny Stage-I batch (192 samples: prompts of 40-880 tokens, answers of
4-24 tokens, the length spread that made padding 3.6x the real tokens). Model: the tiny profile's
Qwen3 (hidden 192, 3 layers) with random weights.

Run: .venv/bin/python -m benchmarks.bench_ppo_update
Target: the micro-batched update is >= 2x faster than one padded pass per minibatch, and both
give the same weights (max |difference| printed).

It also times the micro-batched update under the eager attention kernel against the model's own
(SDPA), with their weight difference: a figure for choosing the PPO pass's kernel (no target;
eager is 1.14x faster for pre-training's 256-token windows, see bench_lm_training.py), the
update's tokens/s and its share of this machine's measured arithmetic bound
(`benchmarks/machine_bound.py`), and, where the CPU computes bfloat16 natively, the update under
bfloat16 autocast (time, ratio, weight difference; no target).
"""

from __future__ import annotations

import copy
import resource
import time
from pathlib import Path

import numpy as np
import pandas as pd
import torch

from benchmarks.machine_bound import describe, machine_bounds, print_bounds, sequence_flops
from pipeline.basemodel.lm_training import attention_kernel
from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.config import load_params
from pipeline.policy.hf_backend import HFBackend
from pipeline.rl import trainer
from pipeline.rl.train_params import train_config

TARGET = 2.0
SAMPLES = 192
ROOT = Path(__file__).resolve().parents[1]


def rollout_batch(vocab: int, seed: int = 0) -> trainer.Batch:
    rng = np.random.default_rng(seed)
    samples, tokens = [], []
    for i in range(SAMPLES):
        prompt = rng.integers(10, vocab, size=int(rng.choice([40, 120, 300, 880], p=[0.3, 0.4, 0.2, 0.1]))).tolist()
        n = int(rng.integers(4, 25))
        sid = f"s{i}"
        samples.append({"sample_id": sid, "prompt_ids": prompt})
        tokens += [{"sample_id": sid, "pos": p, "token_id": int(rng.integers(10, vocab)), "loss_mask": 1,
                    "old_logp": float(-rng.uniform(0.5, 6.0)), "advantage": float(rng.normal())} for p in range(n)]
    return trainer.Batch(pd.DataFrame(samples), pd.DataFrame(tokens), generated_tokens=len(tokens))


def update(backend: HFBackend, start: dict, batch: trainer.Batch, cfg, budget: int,
           bf16: bool = False) -> tuple[float, dict]:
    backend.model.load_state_dict(start)
    trainer.MICRO_BATCH_TOKENS = budget
    optimizer = trainer.make_optimizer(backend.model, cfg)
    began = time.perf_counter()
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
        trainer.ppo_update(backend.model, optimizer, backend, batch, cfg, seed=0)
    return time.perf_counter() - began, {k: v.clone() for k, v in backend.model.state_dict().items()}


def training_work(model: torch.nn.Module, batch: trainer.Batch) -> tuple[int, float]:
    """(prompt + response tokens, FLOP) of one pass over the batch: forward and backward (3x the
    forward) of every prompt and response token."""
    responses = batch.tokens.groupby("sample_id").size()
    prompts = batch.samples.set_index("sample_id")["prompt_ids"].map(len)
    lengths = [int(prompts[s] + responses[s]) for s in batch.samples["sample_id"]]
    return sum(lengths), 3.0 * sequence_flops(model, lengths, [0] * len(lengths))


def max_difference(a: dict, b: dict) -> float:
    return max(float((a[k] - b[k]).abs().max()) for k in a)


def main() -> None:
    torch.set_num_threads(2)
    texts = [f"fact {i}: the city of place {i % 37} lies in country {i % 11}." for i in range(400)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=3000)
    backend = HFBackend(build_tiny_qwen3(tokenizer, seed=0), tokenizer)
    cfg = train_config(load_params(ROOT / "params.yaml", "tiny"), "c_mas_rl")
    batch = rollout_batch(len(tokenizer))
    start = copy.deepcopy(backend.model.state_dict())
    default = trainer.MICRO_BATCH_TOKENS
    update(backend, start, batch, cfg, default)  # warm-up
    padded_s, padded_w = update(backend, start, batch, cfg, 10**12)
    micro_s, micro_w = update(backend, start, batch, cfg, default)
    with attention_kernel(backend.model, "eager"):
        update(backend, start, batch, cfg, default)  # warm-up
        eager_s, eager_w = update(backend, start, batch, cfg, default)
    diff = max_difference(micro_w, padded_w)
    ratio = padded_s / micro_s
    print(f"samples={SAMPLES} loss tokens={len(batch.tokens)} minibatches={cfg.optim.n_minibatches} "
          f"threads={torch.get_num_threads()}")
    print(f"one padded pass per minibatch: {padded_s:.2f} s")
    print(f"micro-batches of <= {default} padded tokens: {micro_s:.2f} s")
    print(f"ratio: {ratio:.2f}x (target >= {TARGET:.0f}x); max |weight difference| {diff:.2e}")
    print(f"micro-batches, eager attention kernel: {eager_s:.2f} s; sdpa / eager {micro_s / eager_s:.2f}x; "
          f"max |weight difference| {max_difference(micro_w, eager_w):.2e}")
    bounds = machine_bounds()
    print_bounds(bounds)
    tokens, work = training_work(backend.model, batch)
    print(describe("micro-batched update (prompt + response tokens, forward and backward)", micro_s, tokens,
                   work, bounds))
    if "bfloat16" in bounds:
        update(backend, start, batch, cfg, default, bf16=True)  # warm-up
        bf16_s, bf16_w = update(backend, start, batch, cfg, default, bf16=True)
        print(f"micro-batches under bfloat16 autocast: {bf16_s:.2f} s; float32 / bfloat16 {micro_s / bf16_s:.2f}x; "
              f"max |weight difference| {max_difference(micro_w, bf16_w):.2e} (no target: a figure for the choice)")
        print(describe("  the same under bfloat16 autocast", bf16_s, tokens, work, bounds, "bfloat16"))
    else:
        print("bfloat16 autocast: skipped (this CPU has no native bfloat16)")
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    print("PASS" if ratio >= TARGET and diff < 1e-4 else "FAIL",
          f"micro-batched update >= {TARGET:.0f}x and the same weights")


if __name__ == "__main__":
    main()
