"""Opening a prebuilt index with a large corpus: start time and peak RSS on a generated
1,000,000-line wiki-18 style corpus (~700 bytes a passage, as wiki-18) and a flat index of
as many vectors, opened the way `serve-retriever --faiss-index` opens them (index
memory-mapped, corpus through an offset table), then a few searches.

wiki-18 has 21M passages: start time grows linearly with the corpus bytes (one sequential
scan for the line offsets) and memory by 8 bytes a passage (the offsets), the mapped index
pages being the kernel's page cache. The vectors here are 64-dimensional (e5-base-v2's 768
would make a 3 GB file for a million passages without changing what is measured: the flat
index is mapped, not read).
Run from the repo root: .venv/bin/python -m benchmarks.bench_prebuilt_corpus [--passages N]"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import faiss
import numpy as np

DIM = 64
WORDS = ("the river castle comet orchestra volcano library glacier harbor desert festival bridge forest "
         "museum island railway temple was founded destroyed rebuilt visited described painted in year").split()


def write_corpus(path: Path, n: int, seed: int = 0) -> int:
    rng = np.random.default_rng(seed)
    vocab = np.array(WORDS)
    block = 10_000
    with path.open("w", encoding="utf-8") as out:
        for start in range(0, n, block):
            words = vocab[rng.integers(0, len(vocab), (min(block, n - start), 100))]
            out.write("".join(json.dumps({"id": str(start + i), "contents": f'"Title {start + i}"\n' + " ".join(row)})
                              + "\n" for i, row in enumerate(words)))
    return path.stat().st_size


def write_index(path: Path, n: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    index = faiss.IndexFlatIP(DIM)
    for start in range(0, n, 100_000):
        vectors = rng.standard_normal((min(100_000, n - start), DIM)).astype(np.float32)
        index.add(vectors / np.linalg.norm(vectors, axis=1, keepdims=True))
    faiss.write_index(index, str(path))


OPEN = """
import resource, sys, time
import numpy as np
started = time.perf_counter()
from pipeline.retrieval.retriever import DenseRetriever
imported = time.perf_counter()
rss_imports = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
retriever = DenseRetriever.from_prebuilt(sys.argv[1], sys.argv[2], encoder=None)
opened = time.perf_counter()
rss_open = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
queries = np.random.default_rng(1).standard_normal((32, retriever.index.d)).astype(np.float32)
t0 = time.perf_counter()
hits = retriever.search_vectors(queries, 3)
search = time.perf_counter() - t0
assert len(hits) == 32 and all(len(h) == 3 for h in hits)
print(f"open: {opened - imported:.1f} s (+ {imported - started:.1f} s imports); peak RSS after imports "
      f"{rss_imports:.0f} MiB, after open {rss_open:.0f} MiB; 32 searches "
      f"(flat scan of {retriever.index.ntotal:,} vectors + passage reads) "
      f"{search:.2f} s; peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passages", type=int, default=1_000_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        corpus, index = Path(tmp) / "wiki.jsonl", Path(tmp) / "flat.index"
        t0 = time.perf_counter()
        size = write_corpus(corpus, args.passages)
        write_index(index, args.passages)
        print(f"generated {args.passages:,} passages ({size / 2**20:.0f} MiB jsonl) and a {DIM}-d flat index "
              f"({index.stat().st_size / 2**20:.0f} MiB) in {time.perf_counter() - t0:.0f} s", flush=True)
        # a fresh process, so the peak RSS is the server's, not the generator's
        subprocess.run([sys.executable, "-c", OPEN, str(index), str(corpus)], check=True)
        per_passage = 8  # the offset table
        print(f"scaled to wiki-18 (21M passages, ~14 GB): offsets {21e6 * per_passage / 2**20:.0f} MiB; "
              f"one sequential read of the corpus at start")
    print(f"this process peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")


if __name__ == "__main__":
    main()
