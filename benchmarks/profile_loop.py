"""Where the seconds of the loop go: one evaluation shard and one training step of the tiny
profile, on the checkout's own data and models, split into phases.

    .venv/bin/python -m benchmarks.profile_loop [--root DIR] [--system multiagent_opd] [--questions 32]
        [--backend engine|engine-bf16|reference] [--grouped-generation on|off]

`--backend engine` (the default) profiles the engine in float32 (pipeline.engine: admission and
prefill, decode steps, sampling, stop strings, finishing rows), `engine-bf16` its bfloat16 path
(the default where the CPU has bf16 natively); `reference` the transformers backend with lock-step
ticks (grouped generation applies to it only).

Needs a checkout where `make repro` ran at least up to the system's training (data/splits,
data/index, data/models/{base,c_mas_rl,<system>}). Prints one table per part: wall seconds of
each phase (prefill, decode forward passes, token sampling, stop strings, retrieval, tables,
Teacher scoring, rewards and advantages, the PPO pass), the count of forward passes, the rows
per decode step, generated tokens per second, and the share of the machine's float32 FLOP bound
the decode reaches (model FLOPs = 2 x parameters per token, attention left out), then peak RSS.
"""

from __future__ import annotations

import argparse
import contextlib
import resource
import time
from collections import defaultdict
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import torch

ROOT = Path(__file__).resolve().parents[1]


class Phases:
    """Wall seconds and call counts per phase; a phase nested in another is counted in both."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = defaultdict(float)
        self.calls: dict[str, int] = defaultdict(int)
        self.rows: list[int] = []

    @contextlib.contextmanager
    def time(self, name: str) -> Iterator[None]:
        began = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] += time.perf_counter() - began
            self.calls[name] += 1

    def wrap(self, owner: object, attribute: str, name: str) -> Callable[[], None]:
        """Time every call of `owner.attribute` as phase `name`; returns the undo."""
        original = getattr(owner, attribute)

        def timed(*args, **kwargs):
            with self.time(name):
                return original(*args, **kwargs)

        setattr(owner, attribute, timed)
        return lambda: setattr(owner, attribute, original)


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def flop_bound_gflops(seconds: float = 1.0) -> float:
    """float32 GFLOP/s of a large matmul on this machine (the bound the decode is compared with)."""
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    for _ in range(3):
        a @ b
    n, began = 0, time.perf_counter()
    while time.perf_counter() - began < seconds:
        a @ b
        n += 1
    return 2 * 1024**3 * n / (time.perf_counter() - began) / 1e9


def instrument(phases: Phases, backend) -> list[Callable[[], None]]:
    """Phase timers on the backend's prefill, its model's forward passes (prefill and decode
    told apart by the sequence length), sampling, stop strings and the whole generate call."""
    from pipeline.policy import hf_backend

    undo = [phases.wrap(backend, "_prefill", "generate: prefill"),
            phases.wrap(backend, "generate", "generate (all)"),
            phases.wrap(hf_backend, "sample_next_tokens", "generate: sampling"),
            phases.wrap(hf_backend.StopStringChecker, "hits", "generate: stop strings")]
    model = backend.model
    forward = model.forward

    def timed_forward(*args, **kwargs):
        ids = kwargs.get("input_ids", args[0] if args else None)
        decode = ids is not None and ids.shape[1] == 1 and torch.is_inference_mode_enabled()
        if decode:
            phases.rows.append(int(ids.shape[0]))
        with phases.time("generate: decode forward" if decode else "forward (prefill, scoring, PPO)"):
            return forward(*args, **kwargs)

    model.forward = timed_forward
    undo.append(lambda: setattr(model, "forward", forward))
    return undo


def instrument_engine(phases: Phases, backend) -> list[Callable[[], None]]:
    """Phase timers on the engine's steps; the rows of every decode step."""
    engine = backend.engine
    undo = [phases.wrap(engine, "_admit", "engine: admission and prefill"),
            phases.wrap(engine, "_sample", "engine: sampling"),
            phases.wrap(engine, "_ended", "engine: stop strings"),
            phases.wrap(engine, "_finish", "engine: finishing rows (prefix cache)")]
    decode = engine._decode

    def timed_decode(*args, **kwargs):
        phases.rows.append(engine.running)
        with phases.time("generate: decode forward"):
            return decode(*args, **kwargs)

    engine._decode = timed_decode
    undo.append(lambda: setattr(engine, "_decode", decode))
    return undo


def open_backend(kind: str, folder: Path):
    if kind == "reference":
        from pipeline.policy.hf_backend import HFBackend

        return HFBackend(folder)
    from pipeline.engine.backend import EngineBackend
    from pipeline.engine.base import EngineConfig

    return EngineBackend(folder, config=EngineConfig(bf16=kind == "engine-bf16"))


def report(title: str, phases: Phases, total: float, generated: int, params: int, bound: float) -> None:
    print(f"\n== {title}: {total:.1f} s")
    for name, seconds in sorted(phases.seconds.items(), key=lambda kv: -kv[1]):
        print(f"  {name:<38} {seconds:8.2f} s  {100 * seconds / total:5.1f}%  {phases.calls[name]:7d} calls")
    if phases.rows:
        decode = phases.seconds["generate: decode forward"]
        steps = len(phases.rows)
        flops = 2 * params * sum(phases.rows)
        print(f"  decode steps {steps}, rows per step mean {np.mean(phases.rows):.1f} "
              f"(median {np.median(phases.rows):.0f}, max {max(phases.rows)}), "
              f"{1000 * decode / steps:.2f} ms per step")
        print(f"  generated tokens {generated}: {generated / total:.0f} tokens/s of the whole; decode forward "
              f"{flops / decode / 1e9:.2f} GFLOP/s = {100 * flops / decode / 1e9 / bound:.1f}% of the "
              f"{bound:.0f} GFLOP/s float32 bound")
    print(f"  peak RSS {peak_rss_mb():.0f} MB")


def profile_evaluation(params, root: Path, system_name: str, questions: int, bound: float,
                       grouped: bool | None = None, kind: str = "engine") -> None:
    """One shard of `questions` x 4 runs after a 4-question warm-up; `grouped` overrides the
    profile's grouped_generation switch."""
    from pipeline.agents import run_workflow
    from pipeline.config import workflow_config
    from pipeline.eval.scoring import score_rollout
    from pipeline.stage_io.inputs import open_retriever, read_split
    from pipeline.systems import system

    target = system(system_name)
    backend = open_backend(kind, target.model_dir(root))
    retriever = open_retriever(root)
    rows = read_split(root, "test").head(questions)
    sampling = params.eval.rollout
    if grouped is not None:
        sampling = sampling.model_copy(update={"grouped_generation": grouped})
    cfg = workflow_config(params, sampling, params.common.protocol.eval_candidates)
    run_workflow(target.workflow, rows.head(4), backend, retriever, cfg, n_traj=params.common.eval.runs, seed=1)
    phases = Phases()
    undo = (instrument if kind == "reference" else instrument_engine)(phases, backend)
    undo.append(phases.wrap(retriever, "search", "retrieval"))
    began = time.perf_counter()
    rollout = run_workflow(target.workflow, rows, backend, retriever, cfg, n_traj=params.common.eval.runs,
                           seed=params.eval.seed)
    with phases.time("score records"):
        score_rollout(rollout, target.name)
    total = time.perf_counter() - began
    for u in undo:
        u()
    if kind != "reference":
        stats = backend.engine.stats
        print(f"engine: {stats.prefill_passes} prefill passes, {stats.prefill_tokens} prompt tokens computed, "
              f"{stats.cached_tokens} of {stats.prompt_tokens} ({100 * stats.cache_share():.0f}%) from the prefix "
              f"cache; {stats.decode_steps} decode steps")
    generated = sum(c.output_tokens for t in rollout.trajectories for c in t.calls)
    report(f"evaluation of {target.name}: {len(rows)} questions x {params.common.eval.runs} runs "
           f"({target.workflow}, {rollout.ticks} ticks, grouped generation {cfg.grouped_generation})",
           phases, total, generated,
           sum(p.numel() for p in backend.model.parameters()), bound)


def profile_training_step(params, root: Path, system_name: str, bound: float, kind: str = "engine") -> None:
    from pipeline.paths import model_dir
    from pipeline.rl import batch_rewards, trainer
    from pipeline.rl.train_params import train_config
    from pipeline.stage_io.inputs import open_retriever, read_split
    from pipeline.systems import TEACHER, trained_system

    target = trained_system(system_name)
    training = target.training
    cfg = train_config(params, target.name)
    policy = open_backend(kind, model_dir(root, "base"))
    teacher = open_backend(kind, model_dir(root, training.teacher)) if training.teacher else None
    judge = open_backend(kind, model_dir(root, training.judge)) if training.judge else None
    inputs = trainer.TrainInputs(policy=policy, retriever=open_retriever(root),
                                 train_questions=read_split(root, "train"), dev_questions=read_split(root, "dev"),
                                 teacher=teacher, judge=judge,
                                 reference=open_backend(kind, model_dir(root, TEACHER))
                                 if target.workflow == "hierarchy" else None)
    phases = Phases()
    undo = (instrument if kind == "reference" else instrument_engine)(phases, policy) + [
        phases.wrap(inputs.retriever, "search", "retrieval"),
        phases.wrap(batch_rewards, "to_tables", "tables"),
        phases.wrap(batch_rewards, "score_with_teacher", "Teacher scoring"),
        phases.wrap(batch_rewards, "compute_rewards", "rewards"),
        phases.wrap(trainer, "compute_advantages", "advantages"),
        phases.wrap(trainer, "run_workflow", "rollout"),
        phases.wrap(trainer, "ppo_update", "PPO pass"),
    ]
    optimizer = trainer.make_optimizer(policy.model, cfg)
    began = time.perf_counter()
    with phases.time("collect batch"):
        batch = trainer.collect_batch(cfg, inputs, 0)
    trainer.ppo_update(policy.model, optimizer, policy, batch, cfg, 0)
    total = time.perf_counter() - began
    with phases.time("dev evaluation (step 0; not in the total)"):
        contexts = trainer.reference_contexts(cfg.dev, inputs)
        trainer.dev_evaluate(cfg.dev, target.workflow, inputs, contexts)
    for u in undo:
        u()
    report(f"one training step of {target.name} ({len(batch.samples)} samples, "
           f"{int((batch.tokens['loss_mask'] > 0).sum())} loss tokens)", phases, total, batch.generated_tokens,
           sum(p.numel() for p in policy.model.parameters()), bound)


def main() -> None:
    from pipeline.config import load_params
    from pipeline.precision import cpu_has_native_bf16

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="checkout holding data/ (default: this one)")
    ap.add_argument("--system", default="multiagent_opd")
    ap.add_argument("--questions", type=int, default=32, help="test questions of the evaluation part (one shard)")
    ap.add_argument("--part", choices=["all", "evaluation", "training"], default="all")
    ap.add_argument("--backend", choices=["engine", "engine-bf16", "reference"], default="engine")
    ap.add_argument("--grouped-generation", choices=["on", "off"], default=None,
                    help="override the profile's grouped_generation switch in the evaluation part")
    args = ap.parse_args()
    torch.manual_seed(0)
    root = Path(args.root).resolve()
    params = load_params(root / "params.yaml", profile="tiny")
    torch.set_num_threads(params.threads)
    bound = flop_bound_gflops()
    print(f"threads {torch.get_num_threads()}; native bf16: {cpu_has_native_bf16()}; "
          f"float32 matmul bound {bound:.0f} GFLOP/s")
    if args.part in ("all", "evaluation"):
        grouped = None if args.grouped_generation is None else args.grouped_generation == "on"
        profile_evaluation(params, root, args.system, args.questions, bound, grouped, args.backend)
    if args.part in ("all", "training"):
        profile_training_step(params, root, args.system, bound, args.backend)


if __name__ == "__main__":
    main()
