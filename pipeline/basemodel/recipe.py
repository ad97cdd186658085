"""The tiny base model's recipe, top to bottom:

scripted demonstrations on training questions (real retriever) -> byte-level BPE on the
passages + demonstrations -> tiny Qwen3 -> LM pre-training on the passages, the
demonstrations' transcripts and copy-forcing reading texts -> format warm-up (SFT on the
demonstrations) -> HF folder. Every number comes from `<profile>.base_model` and
`common.protocol`.
"""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.agents.prompts import load_prompts
from pipeline.basemodel.counterfactual import counterfactual_searchers
from pipeline.basemodel.demos import (
    DemoConfig,
    DemoRates,
    build_demos,
    demo_sequences,
    demo_stats,
    demo_texts,
    training_episodes,
)
from pipeline.basemodel.lm_training import LogFn, pretrain_lm, supervised_finetune
from pipeline.basemodel.reading_texts import reading_texts
from pipeline.basemodel.tiny_model import build_tiny_qwen3, count_parameters
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.policy.hf_backend import save_hf_folder
from pipeline.precision import resolve_bf16
from pipeline.retrieval.retriever import DenseRetriever

# Pre-training runs the eager attention kernel: 1.14x SDPA's speed on its 256-token windows here
# (benchmarks/bench_lm_training.py); SFT keeps SDPA (eager: no faster, +0.9 GB). The saved model keeps SDPA.
PRETRAIN_ATTENTION = "eager"

Curves = Callable[[str], contextlib.AbstractContextManager[LogFn]]  # curve name -> a step logger for that phase


def _no_curves(_: str) -> contextlib.AbstractContextManager[LogFn | None]:
    return contextlib.nullcontext(None)


def train_base_model(params: Params, train: pd.DataFrame, corpus: pd.DataFrame, retriever: DenseRetriever,
                     out: Path, curves: Curves = _no_curves) -> dict[str, Any]:
    """Build, train and save the base model into `out`; returns figures to log
    (sizes, whether bfloat16 autocast ran, final losses, demonstration counts, seconds per phase)."""

    bm, proto = params.base_model, params.common.protocol
    if bm.kind != "scratch" or not (bm.model and bm.pretrain and bm.sft and bm.demos and bm.vocab_size):
        raise InputError(f"{params.profile}.base_model: the recipe needs kind 'scratch' with model, "
                         "pretrain, sft, demos")
    bf16 = resolve_bf16(bm.bf16)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[f"seconds_{name}"] = now - clock
        clock = now

    passages = corpus["text"].tolist()
    d = bm.demos
    cfg = DemoConfig(
        searcher=d.searcher, answerer=d.answerer, leader=d.leader, judge=d.judge,
        rates=DemoRates(d.skip_search, d.vague_query, d.wrong_pick, d.judge_noise),
        top_k=proto.top_k,
        max_searches=min(params.eval.rollout.max_searcher_turns, proto.cascade_steps) - 1,
        max_parallel=proto.max_parallel, max_waves=proto.max_waves,
        hierarchy_steps=proto.hierarchy_steps, seed=bm.seed, hop_by_hop=d.hop_by_hop,
    )
    demos = build_demos(train, retriever, load_prompts(), cfg)
    if not demos:
        raise InputError("train split: no demonstrations could be made (no training questions?)")
    demos, rewritten = counterfactual_searchers(demos, training_episodes(train), d.counterfactual, bm.seed)
    lap("demos")

    tokenizer = train_bpe_tokenizer(
        itertools.chain(passages, demo_texts(demos)), bm.vocab_size, max_token_length=bm.max_token_bytes
    )
    m = bm.model
    model = build_tiny_qwen3(
        tokenizer, hidden_size=m.hidden, num_layers=m.layers, num_heads=m.heads, num_kv_heads=m.kv_heads,
        intermediate_size=m.intermediate, max_position_embeddings=m.max_positions, seed=bm.seed,
    )
    examples = demo_sequences(demos, tokenizer)  # one masked transcript per demonstration
    lap("tokenizer")

    # Pre-training reads the passages, the demonstrations' full transcripts and reading texts
    # (packed, no padding: the cheap way to learn the format and copying); SFT then trains
    # the completions.
    reading = reading_texts(train, corpus, bm.reading_texts, distractors=proto.top_k - 1, seed=bm.seed,
                            neighbours=retriever.neighbours, counterfactual=bm.reading_counterfactual)
    pre = bm.pretrain
    with curves("pretrain") as log_fn:
        pre_hist = pretrain_lm(model, tokenizer, passages + list(demo_texts(demos)) + reading, steps=pre.steps,
                               batch_size=pre.batch_size, seq_len=pre.seq_len, lr=pre.lr, seed=bm.seed,
                               log_fn=log_fn, bf16=bf16, attention=PRETRAIN_ATTENTION)
    lap("pretrain")
    with curves("sft") as log_fn:
        sft_hist = supervised_finetune(model, tokenizer, examples, steps=bm.sft.steps, batch_size=bm.sft.batch_size,
                                       lr=bm.sft.lr, seed=bm.seed, append_eos=False, group_by_length=True,
                                       log_fn=log_fn, bf16=bf16)
    lap("sft")
    save_hf_folder(model, tokenizer, out)
    lap("save")

    return {
        "parameters": count_parameters(model), "vocab": len(tokenizer), "sft_examples": len(examples),
        "bf16_autocast": int(bf16),
        "reading_texts": len(reading), "counterfactual_searcher_demos": rewritten,
        "sft_example_tokens": sum(len(e[0]) + len(e[1]) for e in examples) / len(examples),
        "pretrain_final_loss": _tail_mean(pre_hist), "sft_final_loss": _tail_mean(sft_hist),
        **demo_stats(demos), **seconds, "seconds_training": sum(seconds.values()),
    }


def _tail_mean(history: list[dict], n: int = 10) -> float:
    tail = [h["loss"] for h in history[-n:]]
    return sum(tail) / len(tail)
