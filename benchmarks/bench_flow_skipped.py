"""A Prefect flow run of the ci profile in which every stage is up to date, and the
per-stage cost of a stage's workspace (copy, pull, push, sync back) when DVC must look.

    python benchmarks/bench_flow_skipped.py [--checkout DIR] [--stages STAGE ...]

Without `--checkout`, a fresh copy of the repository (tiny profile, like a clone) is made
and the flow first runs the whole ci DAG to fill it (minutes; not timed). `--checkout DIR`
reuses a copy from an earlier call (printed at the end). Against PREFECT_API_URL when set,
else a temporary Prefect server (its start is not timed).

Prints: the skipped run's wall time and the flow run's own duration against the 30 s
target; then, for `--stages` (default: every stage), `run_stage` on an up-to-date stage:
seconds per phase and the workspace overhead; peak RSS of this process and its children.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import resource
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DVC_NO_ANALYTICS", "1")
os.environ.setdefault("MLFLOW_DISABLE_TELEMETRY", "true")

TARGET_S = 30.0


def peak_rss_mib() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return own, children


def prefect_server():
    if os.environ.get("PREFECT_API_URL"):
        return contextlib.nullcontext()
    from prefect.testing.utilities import prefect_test_harness

    return prefect_test_harness(server_startup_timeout=120)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--checkout", default=None, help="a copy filled by an earlier call (skips the first run)")
    ap.add_argument("--stages", nargs="*", default=None, help="stages whose workspace overhead is measured")
    args = ap.parse_args()

    from flows.dvc_graph import stage_graph
    from flows.stages import paper_flow
    from flows.workspaces import RunLayout, run_stage
    from pipeline.checkout_copy import copy_checkout

    if args.checkout:
        checkout = Path(args.checkout)
    else:
        checkout = copy_checkout(Path(tempfile.mkdtemp(prefix="bench_flow.")) / "repo", profile="tiny")
    os.environ.setdefault("MLFLOW_TRACKING_URI", f"sqlite:///{checkout / 'mlflow.db'}")
    with prefect_server():
        if not args.checkout:
            began = time.perf_counter()
            first = paper_flow(profile="ci", checkout=str(checkout))
            print(f"first run (fills the copy): {time.perf_counter() - began:.0f} s, "
                  f"{sum(s == 'ran' for s in first.values())} stages ran")
        began = time.perf_counter()
        statuses = paper_flow(profile="ci", checkout=str(checkout))
        wall = time.perf_counter() - began
        not_skipped = sorted(s for s, status in statuses.items() if status != "skipped")
        print(f"skipped run: {wall:.1f} s for {len(statuses)} stages (target {TARGET_S:.0f} s, "
              f"ratio {wall / TARGET_S:.2f}) {'PASS' if wall <= TARGET_S and not not_skipped else 'FAIL'}")
        if not_skipped:
            print(f"  not skipped: {not_skipped}")

    layout = RunLayout.for_profile(checkout, "ci")
    graph = stage_graph(layout.root)
    overheads = []
    print("workspace path of an up-to-date stage (seconds): stage, workspace, pull, repro, push, sync, overhead")
    for stage in args.stages or list(graph):
        outcome = run_stage(layout, stage, graph[stage])
        s = outcome.seconds
        overheads.append(outcome.overhead)
        print(f"  {stage:34s} {s.get('workspace', 0):5.2f} {s.get('pull', 0):5.2f} {s.get('repro', 0):5.2f} "
              f"{s.get('push', 0):5.2f} {s.get('sync', 0):5.2f} {outcome.overhead:6.2f}  ({outcome.status})")
    print(f"workspace overhead per stage: median {statistics.median(overheads):.2f} s, "
          f"max {max(overheads):.2f} s over {len(overheads)} stages")
    own, children = peak_rss_mib()
    print(f"peak RSS: {own:.0f} MiB (this process), {children:.0f} MiB (largest child)")
    print(f"checkout: {checkout}  (reuse: --checkout {checkout})")
    return 0 if wall <= TARGET_S and not not_skipped else 1


if __name__ == "__main__":
    sys.exit(main())
