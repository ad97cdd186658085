"""Training step speed and memory of the tiny profile's model per setting, in one run.

Each setting trains in its own process (so each peak RSS is its own), bf16 autocast, 2 threads.
SFT, on synthetic transcripts whose lengths spread like the base model's demonstrations
(median ~170 tokens, a tail to ~1000), ~20 trained tokens each, batch 8:
- `sft as before`: batch width = the longest row (the stage's setting until now);
- `sft padded`: widths rounded up to a multiple of 32, fewer distinct shapes (the stage's setting);
- `sft padded eager`: the same with the eager attention kernel.
Pre-training, 16 windows of 256 tokens: `pretrain sdpa` vs `pretrain eager` (the stage's setting).

Run: .venv/bin/python -m benchmarks.bench_lm_training [--steps 300]
Targets: the stage's settings are >= 1.15x (SFT) and >= 1.1x (pre-training) faster per step.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import resource
import subprocess
import sys
import time

SETTINGS = {  # name: (loop, pad_to_multiple_of, attention kernel)
    "sft as before": ("sft", 1, None), "sft padded": ("sft", 32, None), "sft padded eager": ("sft", 32, "eager"),
    "pretrain sdpa": ("pretrain", 0, None), "pretrain eager": ("pretrain", 0, "eager"),
}
TARGETS = {("sft as before", "sft padded"): 1.15, ("pretrain sdpa", "pretrain eager"): 1.1}


def examples(count: int, vocab: int, seed: int = 0) -> list[tuple[list[int], list[int], list[int]]]:
    """Id triples (prompt, completion, mask): a long context, ~20 trained tokens at the end."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        length = min(int(rng.lognormvariate(5.15, 0.5)), 1000)
        length = max(length, 40)
        prompt = [rng.randrange(3, vocab) for _ in range(30)]
        completion = [rng.randrange(3, vocab) for _ in range(length - 30)]
        mask = [0] * (len(completion) - 20) + [1] * 20
        out.append((prompt, completion, mask))
    return out


def run_setting(name: str, steps: int) -> dict:
    import torch

    from pipeline.basemodel.lm_training import pretrain_lm, supervised_finetune
    from pipeline.basemodel.tiny_model import build_tiny_qwen3
    from pipeline.basemodel.tokenizer import train_bpe_tokenizer

    torch.set_num_threads(2)
    words = [f"w{i} v{i * 7 % 101} x{i % 13}" for i in range(3000)]
    tokenizer = train_bpe_tokenizer(words, vocab_size=1032)
    model = build_tiny_qwen3(tokenizer, hidden_size=192, num_layers=3, num_heads=4, num_kv_heads=4,
                             intermediate_size=512, max_position_embeddings=1024, seed=0)
    loop, pad, attention = SETTINGS[name]
    data = examples(2560, len(tokenizer))

    def train(n: int, seed: int) -> None:
        if loop == "sft":
            supervised_finetune(model, tokenizer, data, steps=n, batch_size=8, lr=1e-3, seed=seed, append_eos=False,
                                group_by_length=True, bf16=True, pad_to_multiple_of=pad, attention=attention)
        else:
            pretrain_lm(model, tokenizer, words, steps=n, batch_size=16, seq_len=256, lr=1e-3, seed=seed,
                        bf16=True, attention=attention)

    train(20, seed=1)  # warm-up
    start = time.perf_counter()
    train(steps, seed=2)
    seconds = time.perf_counter() - start
    return {"ms_per_step": 1000 * seconds / steps,
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--setting", choices=sorted(SETTINGS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.setting:
        print(json.dumps(run_setting(args.setting, args.steps)))
        return
    results = {}
    for name in SETTINGS:
        proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_lm_training", "--steps", str(args.steps),
                               "--setting", name], capture_output=True, text=True,
                              env={**os.environ, "TQDM_DISABLE": "1"}, check=True)
        results[name] = json.loads(proc.stdout.strip().splitlines()[-1])
        r = results[name]
        print(f"{name:>17}: {r['ms_per_step']:6.1f} ms/step  peak RSS {r['peak_rss_mb']:6.0f} MB")
    for (before, after), target in TARGETS.items():
        ratio = results[before]["ms_per_step"] / results[after]["ms_per_step"]
        print(f"{after} vs {before}: {ratio:.2f}x (target >= {target}x) {'OK' if ratio >= target else 'MISSED'}")


if __name__ == "__main__":
    main()
