"""Times `dvc repro` of the foundation stages in a fresh copy of the repository, then a
second `dvc repro` with nothing changed, and prints the figures against the targets.

    python benchmarks/bench_repro.py [--stages splits validate_splits index] [--profile tiny]

Targets (issue 2): first run <= 180 s on 2 cores (tiny profile); no-op run <= 3 s.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from pipeline.workspace import copy_repo  # noqa: E402


def timed(cmd: list[str], cwd: Path, env: dict) -> float:
    start = time.perf_counter()
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if proc.returncode != 0:
        sys.stderr.write(proc.stdout[-3000:] + proc.stderr[-3000:])
        raise SystemExit(f"command failed: {' '.join(cmd)}")
    return seconds


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stages", nargs="*", default=["splits", "corpus", "validate_splits", "index"])
    ap.add_argument("--profile", default="tiny")
    ap.add_argument("--first-target", type=float, default=180.0)
    args = ap.parse_args()
    dvc = str(Path(sys.executable).with_name("dvc"))
    env = {**os.environ, "DVC_NO_ANALYTICS": "1",
           "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}"}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        copy_repo(work, args.profile)
        first = timed([dvc, "repro", *args.stages], work, env)
        second = timed([dvc, "repro", *args.stages], work, env)
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"stages: {' '.join(args.stages)} (profile {args.profile})")
    print(f"first dvc repro:   {first:7.1f} s   target <= {args.first_target:.0f} s   "
          f"{'PASS' if first <= args.first_target else 'FAIL'}")
    print(f"no-op dvc repro:   {second:7.2f} s   target <= 3 s     {'PASS' if second <= 3 else 'FAIL'}")
    print(f"peak RSS of a stage process: {rss_mb:.0f} MB   target < 4096 MB   "
          f"{'PASS' if rss_mb < 4096 else 'FAIL'}")


if __name__ == "__main__":
    main()
