"""What exact resume costs an evaluation: one system's test evaluation with its shards in one
block (every shard driven together, as before blocks existed) and in blocks of N shards (each
block from empty caches, none sharing a forward pass with another), back to back, each in its
own process; prints seconds, peak RSS, the ratio to one block, and whether each setting's
records equal the records already in data/eval/<system>/ (the stage's own output: the
profile's `eval.block_shards` should).

    python benchmarks/bench_eval_blocks.py [--system h_mas_base] [--blocks 40 20]

Needs a checkout where `dvc repro` has made the models, the index and the splits.
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

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def one(system: str, block_shards: int | None, out: Path) -> dict:
    """Evaluate `system` into `out` with the active profile's settings but `block_shards`."""
    from pipeline.config import load_params, workflow_config
    from pipeline.eval.run import evaluate_system
    from pipeline.stage_io.inputs import open_eval_backend, open_retriever, read_split
    from pipeline.systems import system as system_of
    from pipeline.threads import requested_threads, use_threads

    params = load_params(ROOT / "params.yaml")
    use_threads(requested_threads(params.threads))
    record = system_of(system)
    backend = open_eval_backend(record.model_dir(ROOT), params.engine)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    started = time.perf_counter()
    evaluate_system(read_split(ROOT, "test"), backend, open_retriever(ROOT), cfg, params.common.eval.runs,
                    params.eval.shard_questions, out, params.eval.seed, system=system, workflow=record.workflow,
                    progress=False, block_shards=block_shards)
    return {"block_shards": block_shards, "seconds": round(time.perf_counter() - started, 1),
            "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", default="h_mas_base")
    ap.add_argument("--blocks", type=int, nargs="+", default=[40])
    ap.add_argument("--one", type=int, default=None, help=argparse.SUPPRESS)  # a child: 0 = one block
    ap.add_argument("--out", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.out:
        print(json.dumps(one(args.system, args.one or None, Path(args.out))), flush=True)
        return 0
    import pandas as pd

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for blocks in [0, *args.blocks]:
            out = Path(tmp) / f"blocks-{blocks}"
            child = subprocess.run([sys.executable, __file__, "--system", args.system, "--one", str(blocks),
                                    "--out", str(out)], capture_output=True, text=True, check=True)
            row = json.loads(child.stdout.strip().splitlines()[-1])
            committed = ROOT / "data" / "eval" / args.system / "records.parquet"
            same = committed.is_file() and pd.read_parquet(out / "records.parquet").equals(pd.read_parquet(committed))
            rows.append(row)
            base = rows[0]["seconds"]
            print(f"{args.system}: block_shards {row['block_shards'] or 'all'}: {row['seconds']:.1f} s "
                  f"({row['seconds'] / base:.3f}x one block), peak RSS {row['peak_rss_mb']:.0f} MB, "
                  f"records equal data/eval/{args.system}/'s: {same}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
