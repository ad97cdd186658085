"""A training stage killed after a checkpoint and resumed, against the uninterrupted run of the
same checkout: are the weights the same bytes, and what did the kill cost?

    python benchmarks/bench_resume.py --system c_mas_rl --kill-after 16 [--root .]

In a scratch copy of the checkout's inputs (splits, index, base model, the Teacher and the shared
Stage-II start; nothing of the checkout is written), `python -m pipeline run train <system>`
runs until its checkpoint `step-<kill-after>` appears, is killed with SIGKILL, and runs again.
Prints both processes' seconds and peak RSS, the uninterrupted stage's seconds from the
checkout's data/timings.jsonl, and whether the resumed weights equal data/models/<system>.
Needs a checkout where `dvc repro` has run; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INPUTS = ("data/splits", "data/index", "data/models/base", "data/models/c_mas_rl", "data/stage2_start")


def _stage(root: Path, system: str) -> subprocess.Popen:
    env = {**os.environ, "MLFLOW_TRACKING_URI": f"sqlite:///{root / 'mlflow.db'}"}
    return subprocess.Popen([sys.executable, "-m", "pipeline", "--params", str(ROOT / "params.yaml"),
                             "--root", str(root), "run", "train", system],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)


def _children_peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--system", default="c_mas_rl")
    ap.add_argument("--kill-after", type=int, default=16, help="the checkpoint (completed steps) after which to kill")
    ap.add_argument("--root", default=str(ROOT), help="the checkout whose inputs and uninterrupted model are used")
    args = ap.parse_args()
    checkout = Path(args.root).resolve()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for rel in INPUTS:
            if args.system == "c_mas_rl" and rel == "data/models/c_mas_rl":
                continue
            shutil.copytree(checkout / rel, root / rel)
        started = time.perf_counter()
        proc = _stage(root, args.system)
        marker = root / "data" / "checkpoints" / args.system / f"step-{args.kill_after:04d}"
        while not marker.is_dir():
            if proc.poll() is not None:
                raise SystemExit(f"the stage ended ({proc.returncode}) before checkpoint {marker.name}")
            time.sleep(0.05)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        killed_s = time.perf_counter() - started
        started = time.perf_counter()
        out, _ = _stage(root, args.system).communicate()
        resumed_s = time.perf_counter() - started
        summary = json.loads(out.strip().splitlines()[-1])
        same = ((root / "data" / "models" / args.system / "model.safetensors").read_bytes()
                == (checkout / "data" / "models" / args.system / "model.safetensors").read_bytes())
    timings = [json.loads(line) for line in (checkout / "data" / "timings.jsonl").read_text().splitlines()]
    whole = [t["seconds"] for t in timings if t["stage"] == f"train@{args.system}"]
    print(f"train@{args.system}: killed after checkpoint {args.kill_after} at {killed_s:.1f} s; resumed from "
          f"{summary['resumed_from']} in {resumed_s:.1f} s; together {killed_s + resumed_s:.1f} s against "
          f"{whole[-1] if whole else float('nan'):.1f} s uninterrupted (the checkout's last run of the stage); "
          f"peak RSS {_children_peak_mb():.0f} MB; weights equal the uninterrupted run's: {same}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
