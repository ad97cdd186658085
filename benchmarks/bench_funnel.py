"""What the funnel (pipeline.eval.funnel) costs an evaluation stage: the same evaluation without
and with it, back to back, each in a process of its own.

The evaluation is `pipeline.eval.run.evaluate_system` with the engine on the first `--questions`
test questions x 4 runs of one system, shards written to a temporary folder. "Without" replaces the
funnel's table by an empty one (the records lose its columns); "with" is the code as it runs in the
`evaluate` stage, and also times the funnel's own function. Prints both wall times, their ratio
(target: at most 1.05), the funnel's seconds as a share of the evaluation, and each process's peak
RSS. The two runs compute the same rollouts (the funnel reads the rollout, it never changes it), so
their strict EM must be equal.

Needs a checkout where `make repro` ran (its data/models and data/index), given by `--root`.

Run: .venv/bin/python -m benchmarks.bench_funnel --root <checkout> [--system h_mas_base] [--questions 1000]
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pipeline.engine.memory import cap_kernel_cache

cap_kernel_cache()  # as `python -m pipeline` does, before any matmul
ROOT = Path(__file__).resolve().parents[1]
TARGET = 1.05


def one(root: Path, system: str, questions: int, funnel: bool) -> dict:
    import pandas as pd
    import torch

    import pipeline.eval.scoring as scoring
    from pipeline.config import load_params, workflow_config
    from pipeline.eval.run import evaluate_system
    from pipeline.stage_io.inputs import engine_config, read_split
    from pipeline.systems import system as system_named

    torch.set_num_threads(2)
    spent = [0.0]
    if funnel:
        inner = scoring.trajectory_funnel

        def timed(traj):
            began = time.perf_counter()
            try:
                return inner(traj)
            finally:
                spent[0] += time.perf_counter() - began

        scoring.trajectory_funnel = timed
    else:
        scoring.funnel_table = lambda rollout: pd.DataFrame(index=range(len(rollout.trajectories)))
    from pipeline.engine.backend import EngineBackend
    from pipeline.retrieval.retriever import DenseRetriever

    params = load_params(root / "params.yaml", profile="tiny")
    target = system_named(system)
    backend = EngineBackend(target.model_dir(root), config=engine_config(params.engine))
    retriever = DenseRetriever.from_dir(root / "data/index", root=root)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    test = read_split(root, "test").head(questions)
    with tempfile.TemporaryDirectory(prefix="bench_funnel.") as out:
        began = time.perf_counter()
        result = evaluate_system(test, backend, retriever, cfg, params.common.eval.runs, params.eval.shard_questions,
                                 out, params.eval.seed, system=system, workflow=target.workflow, progress=False)
        seconds = time.perf_counter() - began
    return {"seconds": seconds, "funnel_seconds": spent[0], "workflows": len(result.records),
            "strict_em": float(result.records["strict_correct"].mean()),
            "columns": len(result.records.columns),
            "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def spawn(args, funnel: bool) -> dict:
    command = [sys.executable, "-m", "benchmarks.bench_funnel", "--one", "--root", args.root, "--system", args.system,
               "--questions", str(args.questions)] + (["--funnel"] if funnel else [])
    done = subprocess.run(command, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(command)} failed:\n{done.stderr[-4000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", default=str(ROOT), help="checkout holding a make repro's data/")
    ap.add_argument("--system", default="h_mas_base")
    ap.add_argument("--questions", type=int, default=1000)
    ap.add_argument("--one", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--funnel", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one(Path(args.root), args.system, args.questions, args.funnel)))
        return
    off, on = spawn(args, funnel=False), spawn(args, funnel=True)
    print(f"evaluate {args.system}: {on['workflows']} workflows ({args.questions} test questions x 4 runs)")
    for name, r in (("without the funnel", off), ("with the funnel", on)):
        print(f"  {name:<18} {r['seconds']:.1f} s, strict EM {r['strict_em']:.4f}, {r['columns']} record columns, "
              f"peak RSS {r['peak_rss_mb']:.0f} MB")
    print(f"  ratio {on['seconds'] / off['seconds']:.3f} (target <= {TARGET}); the funnel's own function "
          f"{on['funnel_seconds']:.2f} s = {100 * on['funnel_seconds'] / on['seconds']:.2f}% of the evaluation")
    if on["strict_em"] != off["strict_em"]:
        sys.exit("the two evaluations differ in strict EM: the funnel changed the rollout")


if __name__ == "__main__":
    main()
