"""Batched generation vs one `model.generate` call per sequence on the tiny model, plus
teacher-forced scoring and training-step speed of the same config, all in one run.

Also a rollout-shaped tick (prompts of different lengths, each asked 4 times, as an Answerer's
candidates or a question's runs are): HFBackend's generation (one prefill per distinct prompt in
sub-batches of similar length, then decode steps writing into a preallocated KV cache) against
the previous one (one left-padded prefill over every row, a cache grown by concatenation), with
the greedy outputs compared. And a tick of role prompts (each role's instructions, then a
question and retrieved text, each row with its role's token budget): plain generation against
grouped generation (shared prefixes prefilled once, each row stopped at its own budget).

Each speed is also printed as the share of this machine's arithmetic bound that its work uses
(`benchmarks/machine_bound.py`: FLOP counted from the model's shapes, the bound measured as the
best large matrix product), and teacher-forced scoring is timed once more under bfloat16
autocast where the CPU computes bf16 natively (a figure, no target).

Run: .venv/bin/python -m benchmarks.bench_generation
Targets: one batched HFBackend.generate over 64 prompts x 64 new tokens is >= 8x faster
(tokens per second) than 64 per-sequence `model.generate` calls; the tick is >= 2x faster
than the previous generation, and its peak memory above the resident size before the call is
<= 1.5x the float32 KV cache it must hold (the prefill writes each sub-batch into the decode
buffers and finished rows leave in place, so the cache is held once; before, the sub-batch
caches were padded, concatenated, gathered and copied: about twice the cache at the peak);
grouped generation is >= 1.2x faster than plain on the tick of role prompts.
"""

from __future__ import annotations

import gc
import random
import resource
import time

import torch
from transformers import DynamicCache

from benchmarks.machine_bound import describe, forward_flops_per_token, machine_bounds, print_bounds, sequence_flops
from pipeline.basemodel.lm_training import pretrain_lm
from pipeline.basemodel.tiny_model import build_tiny_qwen3, count_parameters
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.policy.base import SamplingParams
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.kv_cache import PreallocatedLayer
from pipeline.policy.logprobs import pack_prompt_response

N_PROMPTS = 64
NEW_TOKENS = 64
TARGET_RATIO = 8.0
TICK_TARGET = 2.0
MEMORY_TARGET = 1.5
GROUPED_TARGET = 1.2
SYLLABLES = ["ka", "lo", "mi", "ra", "tu", "ne", "so", "vi", "da", "pe", "zu", "ho", "bi", "fa", "gu", "je",
             "wo", "xi", "yu", "ce", "mo", "ri", "sa", "te"]
RELATIONS = ["was born in", "works for", "is the capital of", "married", "founded", "plays for"]


def synthetic_sentences(count: int, seed: int = 0, facts: int = 4) -> list[str]:
    """Facts about random names; several per sentence so a few hundred sentences hold enough
    distinct words for a 3,000-token BPE (the 1.8M-parameter config)."""
    rng = random.Random(seed)
    name = lambda: "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 3))).title()  # noqa: E731
    fact = lambda: f"{name()} {rng.choice(RELATIONS)} {name()} in {rng.randint(1800, 2020)}"  # noqa: E731
    return [", and ".join(fact() for _ in range(facts)) + "." for _ in range(count)]


class Previous(HFBackend):
    """The previous generation: every row, duplicates included, in one left-padded prefill, and a
    cache that grows by concatenation."""

    def _padded_prefill(self, rows):
        batch = pack_prompt_response(rows, [[] for _ in rows], self.pad_id, self.device)
        width = batch.input_ids.shape[1] - batch.response_length
        cache = DynamicCache(config=self.model.config)
        logits = self.model(input_ids=batch.input_ids[:, :width], attention_mask=batch.attention_mask[:, :width],
                            position_ids=batch.position_ids[:, :width], past_key_values=cache, use_cache=True,
                            logits_to_keep=1).logits[:, -1]
        return cache, logits, batch.attention_mask[:, :width], batch.position_ids[:, width - 1]

    def _prefill(self, rows, max_new_tokens, shared_prefixes=False):
        return self._padded_prefill(rows)


class PaddedPrefill(Previous):
    """The padded prefill, copied into a preallocated cache that decodes in place."""

    def _prefill(self, rows, max_new_tokens, shared_prefixes=False):
        cache, logits, mask, position = self._padded_prefill(rows)
        cache.layers = [PreallocatedLayer.copy_of(layer.keys, layer.values, mask.shape[1] + max_new_tokens)
                        for layer in cache.layers]
        return cache, logits, mask, position


def rss_mib() -> tuple[float, float]:
    """(resident, high-water mark) of this process in MiB, from /proc (Linux)."""
    fields = dict(line.split(":", 1) for line in open("/proc/self/status"))
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def reset_peak() -> None:
    """Restart the high-water mark at the current resident size (Linux >= 4.0)."""
    with open("/proc/self/clear_refs", "w") as handle:
        handle.write("5")


def kv_cache_mib(model, rows: int, positions: int) -> float:
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    per_token = 2 * config.num_hidden_layers * config.num_key_value_heads * head_dim * 4  # float32 keys + values
    return rows * positions * per_token / 2**20


def tick(model, tokenizer, bounds: dict[str, float]) -> tuple[float, float]:
    """The rollout-shaped tick: the new generation against the previous ones, in seconds and in
    peak memory above the resident size before each call; prints both. Returns the speed ratio
    previous/now and now's peak rise over the size of the float32 KV cache it must hold."""
    rng = random.Random(3)
    texts = synthetic_sentences(64, seed=2, facts=1)
    distinct = [HFBackend(model, tokenizer).encode_prompt(" ".join(rng.choice(texts)
                                                                   for _ in range(rng.randint(2, 35))))
                for _ in range(64)]
    distinct = [p[: rng.randint(40, 500)] for p in distinct]
    prompts = [p for p in distinct for _ in range(4)]
    params = SamplingParams(temperature=0.0, max_new_tokens=24, seed=0)
    seconds, rise, outputs = {}, {}, {}
    for name, cls in (("previous", Previous), ("padded prefill", PaddedPrefill), ("now", HFBackend)):
        backend = cls(model, tokenizer)
        backend.eos_ids = set()
        backend.generate(prompts[:2], SamplingParams(max_new_tokens=2, seed=0))  # warm-up
        gc.collect()
        before = rss_mib()[0]
        reset_peak()
        start = time.perf_counter()
        outputs[name] = [g[0].token_ids for g in backend.generate(prompts, params)]
        seconds[name] = time.perf_counter() - start
        rise[name] = rss_mib()[1] - before
    same = sum(a == b == c for a, b, c in zip(*outputs.values()))
    ratio = seconds["previous"] / seconds["now"]
    cache = kv_cache_mib(model, len(prompts), max(map(len, distinct)) + params.max_new_tokens)
    print(f"tick of {len(prompts)} rows ({len(distinct)} distinct prompts, "
          f"{min(map(len, distinct))}..{max(map(len, distinct))} tokens, 24 greedy tokens each): "
          f"previous (padded prefill, growing cache) {seconds['previous']:.2f} s; padded prefill, in-place cache "
          f"{seconds['padded prefill']:.2f} s; now (one prefill per distinct prompt, length-sorted, in-place cache) "
          f"{seconds['now']:.2f} s; ratio previous/now {ratio:.2f}x (target >= {TICK_TARGET:.0f}x); "
          f"identical greedy outputs {same}/{len(prompts)}")
    generated = sum(len(o) for o in outputs["now"])
    new = params.max_new_tokens
    work = sequence_flops(model, [len(p) for p in distinct], [0] * len(distinct)) + sum(
        new * forward_flops_per_token(model, len(p) + new / 2) for p in prompts)  # distinct prefills, every decode
    print(describe("  tick, now (generated tokens; work = distinct prefills + every row's decode)",
                   seconds["now"], generated, work, bounds))
    print(f"tick peak memory above the resident size before the call: previous {rise['previous']:.0f} MiB, "
          f"padded prefill {rise['padded prefill']:.0f} MiB, now {rise['now']:.0f} MiB, for a KV cache of "
          f"{cache:.0f} MiB: now/cache {rise['now'] / cache:.2f}x (target <= {MEMORY_TARGET}x)")
    return ratio, rise["now"] / cache


def grouped_tick(model, tokenizer) -> float:
    """A rollout-shaped tick whose prompts start alike as an evaluation tick's do (each role's
    instructions, then one of 32 questions, then 0-12 retrieved sentences) and whose rows have
    their role's token budget (Leader 48, Searcher 40, Answerer 24): the plain generation against
    the grouped one (shared prefixes prefilled once, each row stopped at its budget). Returns the
    speed ratio plain/grouped."""
    from pipeline.agents.prompts import load_prompts

    rng = random.Random(4)
    texts = synthetic_sentences(200, seed=5, facts=1)
    questions = [f"Who {rng.choice(RELATIONS)} {t.split()[0]}?" for t in texts[:32]]
    roles = load_prompts()
    budgets_of = {"leader": 48, "searcher": 40, "answerer": 24}
    encode = HFBackend(model, tokenizer).encode_prompt
    prompts, budgets = [], []
    for _ in range(128):
        role, question = rng.choice(sorted(budgets_of)), rng.choice(questions)
        found = " ".join(rng.choice(texts) for _ in range(rng.randint(0, 12)))
        if role == "searcher":
            text = roles.searcher.format(task=question) + " " + found
        else:
            text = getattr(roles, role).format(question=question, reports=found, max_parallel=3)
        prompts.append(encode(text))
        budgets.append(budgets_of[role])
    seeds = tuple(range(len(prompts)))
    common = dict(temperature=1.0, max_new_tokens=48, row_seeds=seeds)
    backend = HFBackend(model, tokenizer)
    backend.eos_ids = set()
    seconds, outputs = {"plain": [], "grouped": []}, {}
    for _ in range(3):
        for name, params in (("plain", SamplingParams(**common)),
                             ("grouped", SamplingParams(**common, shared_prefixes=True,
                                                        row_max_new_tokens=tuple(budgets)))):
            start = time.perf_counter()
            outputs[name] = [g[0].token_ids[:b] for g, b in zip(backend.generate(prompts, params), budgets)]
            seconds[name].append(time.perf_counter() - start)
    plain, grouped = min(seconds["plain"]), min(seconds["grouped"])
    same = sum(a == b for a, b in zip(outputs["plain"], outputs["grouped"]))
    ratio = plain / grouped
    print(f"tick with shared prefixes, {len(prompts)} rows ({min(map(len, prompts))}..{max(map(len, prompts))} "
          f"tokens, budgets 24/40/48, no early stop), best of 3: plain {plain:.2f} s; grouped (shared prefixes, "
          f"row budgets) {grouped:.2f} s; ratio {ratio:.2f}x (target >= {GROUPED_TARGET}x); identical rows "
          f"after the budget cut {same}/{len(prompts)}")
    return ratio


def bf16_score(backend: HFBackend, prompts: list[list[int]], responses: list[list[int]],
               bounds: dict[str, float]) -> float | None:
    """Teacher-forced scoring in float32 against bfloat16 autocast, where the CPU computes bf16
    natively: best-of-3 seconds of each, the speed ratio and the largest log-prob difference.
    Returns the ratio (None where bf16 is not native)."""
    if "bfloat16" not in bounds:
        print("score under bfloat16 autocast: skipped (this CPU has no native bfloat16)")
        return None
    seconds, logps = {}, {}
    for name, enabled in (("float32", False), ("bfloat16", True)):
        runs = []
        for _ in range(3):
            start = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=enabled):
                logps[name] = backend.score(prompts, responses)
            runs.append(time.perf_counter() - start)
        seconds[name] = min(runs)
    diff = max(abs(a - b) for x, y in zip(logps["float32"], logps["bfloat16"]) for a, b in zip(x, y))
    ratio = seconds["float32"] / seconds["bfloat16"]
    print(f"score, best of 3: float32 {seconds['float32']:.2f} s, bfloat16 autocast {seconds['bfloat16']:.2f} s, "
          f"ratio {ratio:.2f}x; max |log-prob difference| {diff:.3f} nats (no target: a figure for the choice)")
    return ratio


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def main() -> None:
    texts = synthetic_sentences(500)
    tokenizer = train_bpe_tokenizer(texts, vocab_size=3000)
    model = build_tiny_qwen3(tokenizer, seed=0).eval()
    backend = HFBackend(model, tokenizer)
    backend.eos_ids = set()  # random weights: never stop early, every row makes NEW_TOKENS tokens
    prompts = [backend.encode_prompt(t) for t in synthetic_sentences(N_PROMPTS, seed=1, facts=1)]
    total_tokens = N_PROMPTS * NEW_TOKENS
    print(f"threads={torch.get_num_threads()} vocab={len(tokenizer)} params={count_parameters(model):,} "
          f"prompt tokens={min(map(len, prompts))}..{max(map(len, prompts))}")

    params = SamplingParams(temperature=1.0, top_p=1.0, max_new_tokens=NEW_TOKENS, seed=0)
    backend.generate(prompts[:2], SamplingParams(max_new_tokens=4, seed=0))  # warm-up
    start = time.perf_counter()
    generations = [g[0] for g in backend.generate(prompts, params)]
    batched_s = time.perf_counter() - start
    assert sum(len(g.token_ids) for g in generations) == total_tokens

    start = time.perf_counter()
    with torch.inference_mode():
        for prompt in prompts:
            out = model.generate(
                torch.tensor([prompt]), do_sample=True, max_new_tokens=NEW_TOKENS, min_new_tokens=NEW_TOKENS,
                pad_token_id=tokenizer.pad_token_id, top_k=0, top_p=1.0, temperature=1.0,
            )
            assert out.shape[1] - len(prompt) == NEW_TOKENS
    single_s = time.perf_counter() - start

    start = time.perf_counter()
    backend.score(prompts, [g.token_ids for g in generations])
    score_s = time.perf_counter() - start

    bounds = machine_bounds()
    print_bounds(bounds)
    lengths = [len(p) for p in prompts]
    batched_work = sequence_flops(model, lengths, [NEW_TOKENS] * len(prompts))
    batched_tps, single_tps = total_tokens / batched_s, total_tokens / single_s
    ratio = batched_tps / single_tps
    print(f"batched HFBackend.generate: {batched_tps:9.1f} tok/s ({batched_s:.2f} s for {total_tokens} tokens)")
    print(f"per-sequence model.generate: {single_tps:9.1f} tok/s ({single_s:.2f} s)")
    print(f"ratio batched/per-sequence: {ratio:.1f}x (target >= {TARGET_RATIO:.0f}x)")
    print(f"HFBackend.score (teacher forcing): {total_tokens / score_s:9.1f} tok/s ({score_s:.2f} s)")
    print(describe("  batched generate (generated tokens; work = prefill + decode)", batched_s, total_tokens,
                   batched_work, bounds))
    print(describe("  per-sequence model.generate (same work)", single_s, total_tokens, batched_work, bounds))
    print(describe("  score (response tokens; work = prompt + response forward)", score_s, total_tokens,
                   sequence_flops(model, [p + NEW_TOKENS for p in lengths], [0] * len(prompts)), bounds))
    bf16_score(backend, prompts, [g.token_ids for g in generations], bounds)

    for batch_size, seq_len in [(16, 128), (16, 256)]:
        steps = 5
        train_model = build_tiny_qwen3(tokenizer, seed=0)
        pretrain_lm(train_model, tokenizer, texts, steps=1, batch_size=batch_size, seq_len=seq_len, lr=1e-3, seed=0)
        start = time.perf_counter()
        pretrain_lm(train_model, tokenizer, texts, steps=steps, batch_size=batch_size, seq_len=seq_len, lr=1e-3, seed=0)
        step_s = (time.perf_counter() - start) / steps
        print(f"train step (batch {batch_size} x seq {seq_len}): {step_s:.3f} s/step "
              f"= {batch_size * seq_len / step_s:,.0f} tok/s; steps in 180 s: {int(180 / step_s)}")

    # The tick on the tiny profile's attention (4 query and 4 key/value heads, params.yaml
    # tiny.base_model.model). With grouped heads (this file's other model: 2 key/value heads)
    # transformers' CPU attention copies the whole cache into a fresh ~60 MB tensor per layer
    # and step, and its time then swings 1.5-3 s with whether glibc serves that tensor from
    # freed heap or from new pages.
    tiny_attention = build_tiny_qwen3(tokenizer, num_kv_heads=4, seed=0).eval()
    tick_ratio, memory_ratio = tick(tiny_attention, tokenizer, bounds)
    grouped_ratio = grouped_tick(tiny_attention, tokenizer)
    print(f"peak RSS: {peak_rss_mib():.0f} MiB")
    print("PASS" if ratio >= TARGET_RATIO else "FAIL", f"batched >= {TARGET_RATIO:.0f}x per-sequence")
    print("PASS" if tick_ratio >= TICK_TARGET else "FAIL", f"tick >= {TICK_TARGET:.0f}x the previous generation")
    print("PASS" if memory_ratio <= MEMORY_TARGET else "FAIL", f"tick's peak <= {MEMORY_TARGET}x its KV cache")
    print("PASS" if grouped_ratio >= GROUPED_TARGET else "FAIL",
          f"tick with shared prefixes: grouped >= {GROUPED_TARGET}x plain")


if __name__ == "__main__":
    main()
