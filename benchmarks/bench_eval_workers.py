"""One evaluation in one process against the same evaluation shared out among worker processes
(`<profile>.eval.workers`), on a checkout's own test questions and trained model.

    .venv/bin/python -m benchmarks.bench_eval_workers [--root DIR] [--system multiagent_opd]
        [--questions 128] [--workers 2]

Needs a checkout where `make repro` ran up to the system's training (data/splits, data/index,
data/models/<system>). Runs the first `--questions` test questions x 4 runs with 1 process and
its torch threads, then with `--workers` processes sharing the threads, each into a temporary
folder, and prints the seconds of each, the ratio, the peak RSS of this process and of the largest
worker, and how many strict answers differ (the thread count changes the floating-point sums,
so a sampled token may flip).
"""

from __future__ import annotations

import argparse
import functools
import os
import resource
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def peak_mb(who: int) -> float:
    return resource.getrusage(who).ru_maxrss / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--root", type=Path, default=ROOT)
    parser.add_argument("--system", default="multiagent_opd")
    parser.add_argument("--questions", type=int, default=128)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    root = args.root.resolve()
    os.chdir(root)

    import torch

    from pipeline.config import load_params, workflow_config
    from pipeline.eval.run import evaluate_system, worker_threads
    from pipeline.stages.inputs import open_eval_tools, read_split
    from pipeline.systems import system

    params = load_params(root / "params.yaml")
    target = system(args.system)
    questions = read_split(root, "test").head(args.questions)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    open_tools = functools.partial(open_eval_tools, target.model_dir(root), root)
    print(f"{args.system}: {len(questions)} test questions x {params.common.eval.runs} runs, "
          f"shards of {params.eval.shard_questions}; CPU threads {torch.get_num_threads()}")

    seconds, records = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for workers in (1, args.workers):
            tools = open_tools() if workers == 1 else (None, None)
            start = time.perf_counter()
            result = evaluate_system(questions, *tools, cfg, params.common.eval.runs, params.eval.shard_questions,
                                     Path(tmp) / f"w{workers}", params.eval.seed, system=args.system,
                                     workflow=target.workflow, progress=False, workers=workers,
                                     open_tools=open_tools)
            seconds[workers], records[workers] = time.perf_counter() - start, result.records
            print(f"workers {workers} ({worker_threads(workers)} torch threads each): {seconds[workers]:.1f} s")

    one, many = records[1], records[args.workers]
    differ = int((one["strict_answer"] != many["strict_answer"]).sum())
    parent, worker = peak_mb(resource.RUSAGE_SELF), peak_mb(resource.RUSAGE_CHILDREN)
    print(f"ratio 1 process / {args.workers} workers: {seconds[1] / seconds[args.workers]:.2f}x")
    print(f"strict answers that differ: {differ} of {len(one)}; mean strict EM "
          f"{one['strict_correct'].mean():.4f} (1 process) vs {many['strict_correct'].mean():.4f}")
    print(f"peak RSS: this process {parent:.0f} MB (it ran the 1-process evaluation), largest worker "
          f"{worker:.0f} MB; {args.workers} workers hold at most {args.workers * worker:.0f} MB")


if __name__ == "__main__":
    main()
