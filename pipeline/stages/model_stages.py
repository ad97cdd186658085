"""Stage `base_model`: the base model every system starts from, and its behaviour on dev.

scratch (tiny, ci): scripted demonstrations on training questions (real retriever) ->
byte-level BPE on passages + demonstrations -> tiny Qwen3 -> LM pre-training on the
passages, the demonstrations and copy-forcing reading texts (policy.reading_texts) ->
format warm-up (SFT on the demonstrations) -> HF folder data/models/base.
local (paper): check and hash the local folder; write data/models/base/model_ref.json.
Then (behaviour_questions > 0) both workflows run once on dev questions with the saved
model in evaluation mode; the figures go to data/metrics/base_behaviour.json and MLflow.
"""

from __future__ import annotations

import itertools
import time
from pathlib import Path
from typing import Any

import pandas as pd

from pipeline.config import Params, workflow_config
from pipeline.io import InputError, write_json
from pipeline.stages.paths import Paths
from pipeline.systems import model_dir
from pipeline.tracking import CurveLogger, stage_run

ROLES = ("leader", "searcher", "answerer")
BEHAVIOUR_BATCH = 16  # rows per generate call: bounds the prefill's memory and padding (256 rows: ~6 GB)
# Pre-training runs the eager attention kernel: 1.14x SDPA's speed on its 256-token windows here
# (benchmarks/bench_lm_training.py); SFT keeps SDPA (eager: no faster, +0.9 GB). The saved model keeps SDPA.
PRETRAIN_ATTENTION = "eager"


def behaviour_path(root: Path) -> Path:
    """The DVC metric file of the stage (outside the model folder, so DVC can track both)."""
    return root / "data" / "metrics" / "base_behaviour.json"


def run_base_model(params: Params, root: Path) -> dict:
    bm = params.base_model
    out = model_dir(root, "base")
    with stage_run("base_model", params.profile, bm.model_dump()) as mlf:
        if bm.kind == "local":
            from pipeline.policy.model_ref import write_model_ref

            start = time.perf_counter()
            ref = write_model_ref(root / bm.path, out, source=bm.path)
            mlf.set_tag("model_sha256", ref["sha256"])
            mlf.log_metrics({"files": len(ref["files"]), "hash_seconds": time.perf_counter() - start})
            summary: dict[str, Any] = {"kind": "local", "sha256": ref["sha256"], "files": len(ref["files"])}
        else:
            summary = {"kind": "scratch", **_train_scratch(params, root, out, mlf)}
        if bm.behaviour_questions > 0:
            start = time.perf_counter()
            behaviour = measure_behaviour(params, root, out)
            behaviour["seconds"] = time.perf_counter() - start
            write_json(behaviour_path(root), behaviour)
            mlf.log_metrics(_flat_metrics(behaviour))
            mlf.log_artifact(str(behaviour_path(root)))
            summary["behaviour"] = behaviour
    return summary


def _train_scratch(params: Params, root: Path, out: Path, mlf: Any) -> dict:
    """Demonstrations, tokenizer, tiny Qwen3, pre-training, format warm-up; saves `out`."""
    import torch

    from pipeline.agents.prompts import load_prompts
    from pipeline.policy.demos import DemoConfig, DemoRates, build_demos, demo_sequences, demo_stats, demo_texts
    from pipeline.policy.lm_training import pretrain_lm, supervised_finetune
    from pipeline.policy.reading_texts import reading_texts
    from pipeline.policy.tiny_model import build_tiny_qwen3, count_parameters, save_hf_folder
    from pipeline.policy.tokenizer import train_bpe_tokenizer
    from pipeline.retrieval.retriever import DenseRetriever

    bm, proto = params.base_model, params.common.protocol
    assert bm.model and bm.pretrain and bm.sft and bm.demos and bm.vocab_size  # checked by BaseModelParams
    torch.set_num_threads(bm.threads)
    paths = Paths(root)
    seconds: dict[str, float] = {}
    clock = time.perf_counter()

    def lap(name: str) -> None:
        nonlocal clock
        now = time.perf_counter()
        seconds[f"seconds_{name}"] = now - clock
        clock = now

    train = _read_split(paths.split("train"))
    corpus = pd.read_parquet(paths.corpus)
    passages = corpus["text"].tolist()
    d = bm.demos
    cfg = DemoConfig(
        searcher=d.searcher, answerer=d.answerer, leader=d.leader, judge=d.judge,
        rates=DemoRates(d.skip_search, d.vague_query, d.wrong_pick, d.judge_noise),
        top_k=proto.top_k,
        max_searches=min(params.eval.rollout.max_searcher_turns, proto.cascade_steps) - 1,
        max_parallel=proto.max_parallel, max_waves=proto.max_waves,
        hierarchy_steps=proto.hierarchy_steps, seed=bm.seed,
    )
    retriever = DenseRetriever.from_dir(paths.index)
    demos = build_demos(train, retriever, load_prompts(), cfg)
    if not demos:
        raise InputError(f"{paths.split('train')}: no demonstrations could be made (no training questions?)")
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
                            neighbours=retriever.neighbours)
    pre = bm.pretrain
    with CurveLogger(mlf, "pretrain") as curve:
        pre_hist = pretrain_lm(model, tokenizer, passages + list(demo_texts(demos)) + reading, steps=pre.steps,
                               batch_size=pre.batch_size, seq_len=pre.seq_len, lr=pre.lr, seed=bm.seed,
                               log_fn=curve, bf16=bm.bf16, attention=PRETRAIN_ATTENTION)
    lap("pretrain")
    with CurveLogger(mlf, "sft") as curve:
        sft_hist = supervised_finetune(model, tokenizer, examples, steps=bm.sft.steps, batch_size=bm.sft.batch_size,
                                       lr=bm.sft.lr, seed=bm.seed, append_eos=False, group_by_length=True,
                                       log_fn=curve, bf16=bm.bf16)
    lap("sft")
    save_hf_folder(model, tokenizer, out)
    lap("save")

    figures = {
        "parameters": count_parameters(model), "vocab": len(tokenizer), "sft_examples": len(examples),
        "reading_texts": len(reading),
        "sft_example_tokens": sum(len(e[0]) + len(e[1]) for e in examples) / len(examples),
        "pretrain_final_loss": _tail_mean(pre_hist), "sft_final_loss": _tail_mean(sft_hist),
        **demo_stats(demos), **seconds, "seconds_training": sum(seconds.values()),
    }
    mlf.log_metrics({k: float(v) for k, v in figures.items()})
    return figures


def _tail_mean(history: list[dict], n: int = 10) -> float:
    tail = [h["loss"] for h in history[-n:]]
    return sum(tail) / len(tail)


def _read_split(path: Path) -> pd.DataFrame:
    if not path.is_file():
        raise InputError(f"{path}: split not found; run the `splits` stage first")
    return pd.read_parquet(path)


def measure_behaviour(params: Params, root: Path, base_dir: Path) -> dict:
    """Both workflows, one rollout per dev question, evaluation sampling, with the model in
    `base_dir`: well-formed share per role, searches, no-search share, strict EM (also on
    single-hop questions)."""
    from pipeline.agents.records import samples_table
    from pipeline.agents.workflows import run_workflow
    from pipeline.eval.em import exact_match
    from pipeline.eval.extraction import strict_answer
    from pipeline.policy.hf_backend import HFBackend
    from pipeline.policy.model_ref import resolve_model_dir
    from pipeline.retrieval.retriever import DenseRetriever

    paths = Paths(root)
    dev = _read_split(paths.split("dev")).head(params.base_model.behaviour_questions)
    families = dict(zip(dev["id"].astype(str), dev["family"] if "family" in dev else ["?"] * len(dev)))
    backend = HFBackend(resolve_model_dir(base_dir), max_batch_size=BEHAVIOUR_BATCH)
    retriever = DenseRetriever.from_dir(paths.index)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    result: dict[str, Any] = {"questions": len(dev)}
    calls: dict[str, list[bool]] = {r: [] for r in ROLES}
    for workflow in ("cascade", "hierarchy"):
        rollout = run_workflow(workflow, dev, backend, retriever, cfg, n_traj=1, seed=params.eval.seed)
        samples = samples_table(rollout)
        figures: dict[str, float] = {}
        for role in ROLES:
            malformed = samples.loc[samples["role"] == role, "malformed"].astype(bool).tolist()
            calls[role] += malformed
            if malformed:
                figures[f"wellformed_{role}"] = 1.0 - sum(malformed) / len(malformed)
                figures[f"calls_{role}"] = len(malformed)
        trajs = rollout.trajectories
        correct = [exact_match(strict_answer(t.last_answerer_output), t.golden_answers) for t in trajs]
        single = [c for t, c in zip(trajs, correct) if families.get(t.question_id) == "single-hop"]
        figures.update({
            "searches_per_workflow": sum(t.search_actions for t in trajs) / len(trajs),
            "no_search_share": sum(t.search_actions == 0 for t in trajs) / len(trajs),
            "em": sum(correct) / len(trajs),
            "em_single_hop": sum(single) / len(single) if single else float("nan"),
            "single_hop_questions": len(single),
            "has_final_answer": sum(t.has_final_answer for t in trajs) / len(trajs),
            "forced_answer": sum(t.forced_answer for t in trajs) / len(trajs),
        })
        result[workflow] = figures
    result["wellformed"] = {r: 1.0 - sum(v) / len(v) for r, v in calls.items() if v}
    return result


def _flat_metrics(behaviour: dict) -> dict[str, float]:
    out = {}
    for key, value in behaviour.items():
        if isinstance(value, dict):
            out.update({f"behaviour_{key}_{k}": float(v) for k, v in value.items()})
        else:
            out[f"behaviour_{key}"] = float(value)
    return out
