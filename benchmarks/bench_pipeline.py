"""Runs the whole paper (`dvc repro`) on a profile in a fresh copy of the repository and
prints, per stage, the wall time and peak RSS against the targets, then the total and
a no-op `dvc repro`.

    python benchmarks/bench_pipeline.py [--profile tiny] [--keep DIR] [--targets STAGE ...]

`--targets validate_splits index` times the foundation stages alone.

Targets (tiny): every stage < 4 GB peak RSS; base_model <= 240 s; each training stage
<= 120 s; splits + corpus + validate_splits + index <= 180 s; the whole run <= 1200 s;
a second `dvc repro` <= 3 s.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.checkout_copy import copy_checkout

TRAINING = ("train@",)
FOUNDATION = ("splits", "corpus", "validate_splits", "index")


def target_for(stage: str) -> float | None:
    if stage == "base_model":
        return 240.0
    if stage.startswith(TRAINING):
        return 120.0
    return None


def run_dvc(work: Path, targets: list[str]) -> float:
    env = {**os.environ, "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    env.pop("MLFLOW_TRACKING_URI", None)
    began = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).with_name("dvc")), "repro", *targets], cwd=work, env=env,
                          capture_output=True, text=True)
    if proc.returncode != 0:
        sys.stderr.write((proc.stdout + proc.stderr)[-4000:])
        raise SystemExit("dvc repro failed")
    return time.perf_counter() - began


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--keep", default=None, help="run in this folder and keep it")
    ap.add_argument("--targets", nargs="*", default=[], help="dvc repro targets (default: everything)")
    args = ap.parse_args()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="bench-pipeline-"))
    if work.exists() and args.keep:
        shutil.rmtree(work)
    copy_checkout(work, args.profile)
    total = run_dvc(work, args.targets)
    noop = run_dvc(work, args.targets)
    rows = [json.loads(line) for line in (work / "data" / "timings.jsonl").read_text().splitlines()]
    ok = True
    print(f"{'stage':42s} {'seconds':>8s} {'peak RSS MB':>12s}  target")
    for r in rows:
        target = target_for(r["stage"])
        passed = r["peak_rss_mb"] < 4096 and (target is None or r["seconds"] <= target)
        ok &= passed
        label = f"<= {target:.0f} s" if target else ""
        print(f"{r['stage']:42s} {r['seconds']:8.1f} {r['peak_rss_mb']:12.0f}  "
              f"{label:9s} {'PASS' if passed else 'FAIL'}")
    foundation = sum(r["seconds"] for r in rows if r["stage"] in FOUNDATION)
    print(f"foundation stages: {foundation:.0f} s (target <= 180 s) {'PASS' if foundation <= 180 else 'FAIL'}")
    print(f"dvc repro {' '.join(args.targets) or '(all)'}: {total:.0f} s (whole paper: target <= 1200 s) "
          f"{'PASS' if total <= 1200 else 'FAIL'}")
    print(f"no-op dvc repro:   {noop:.2f} s (target <= 3 s) {'PASS' if noop <= 3 else 'FAIL'}")
    print("all targets met" if ok and total <= 1200 and noop <= 3 else "some targets missed")
    if not args.keep:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
