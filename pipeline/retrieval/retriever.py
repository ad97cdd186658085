"""Dense retrieval over a faiss inner-product index: one encoder batch + one faiss search."""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from pipeline.errors import InputError
from pipeline.retrieval.base import Passage
from pipeline.retrieval.encoders import Encoder, make_encoder
from pipeline.retrieval.index import PASSAGE_COLUMNS, LoadedIndex, load_index, open_prebuilt
from pipeline.retrieval.jsonl_corpus import JsonlCorpus


def check_k(k: Any) -> int:
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise InputError(f"k: expected an integer >= 1, got {k!r}")
    return int(k)


# Queries whose results a retriever remembers (least recently used out): the runs of one
# question, and its Searchers, repeat queries (about half of an evaluation's are repeats).
QUERY_MEMORY = 65536


class DenseRetriever:
    """Retriever protocol implementation: E5 queries against a flat IP faiss index.

    A query searched before is answered from memory (its first result, whatever batch it was
    encoded in), so a query's result never depends on what it is batched with."""

    def __init__(self, index: Any, passages: pa.Table | pd.DataFrame | JsonlCorpus,
                 encoder: Encoder | None) -> None:
        if isinstance(passages, JsonlCorpus):
            table: pa.Table | JsonlCorpus = passages
        else:
            table = passages if isinstance(passages, pa.Table) else pa.Table.from_pandas(
                passages, preserve_index=False)
            missing = [c for c in PASSAGE_COLUMNS if c not in table.column_names]
            if missing:
                raise InputError(f"passages: missing column(s) {missing}; expected {list(PASSAGE_COLUMNS)}")
            table = table.select(list(PASSAGE_COLUMNS))
        if table.num_rows != index.ntotal:
            raise InputError(f"passages: {table.num_rows} rows but the index holds {index.ntotal} vectors")
        if encoder is not None and encoder.dim != index.d:
            raise InputError(f"encoder {encoder.name!r}: dim {encoder.dim} != index dimension {index.d}")
        self.index = index
        self.passages = table
        self.encoder = encoder
        self._search_lock = threading.Lock()  # faiss GPU indexes are not thread-safe
        self._rows: dict[str, int] | None = None  # passage text -> index row, for `neighbours`
        self._memory: OrderedDict[tuple[str, int], list[Passage]] = OrderedDict()
        self._memory_lock = threading.Lock()

    def _take(self, rows: np.ndarray) -> list[dict]:
        if isinstance(self.passages, JsonlCorpus):
            return self.passages.rows(rows)
        return self.passages.take(pa.array(rows, pa.int64())).to_pylist()

    @classmethod
    def from_loaded(cls, loaded: LoadedIndex, encoder: Encoder | None) -> DenseRetriever:
        return cls(loaded.index, loaded.passages, encoder)

    @classmethod
    def from_dir(cls, index_dir: str | Path, encoder: Encoder | None = None,
                 root: str | Path | None = None, device: str = "auto") -> DenseRetriever:
        """Open an index folder; the encoder is made from index.json's name when None (a
        relative folder, and a prebuilt index's files, taken from `root`: default the working
        directory)."""
        loaded = load_index(index_dir, root=root)
        if encoder is None:
            name = loaded.meta.get("encoder")
            if not isinstance(name, str):
                raise InputError(f"{Path(index_dir) / 'index.json'}: field 'encoder' missing")
            encoder = make_encoder(name, device=device, root=root)
        return cls.from_loaded(loaded, encoder)

    @classmethod
    def from_prebuilt(cls, faiss_index: str | Path, corpus: str | Path, encoder: Encoder | None,
                      mmap: bool = True) -> DenseRetriever:
        """A Search-R1 / FlashRAG flat index and its jsonl corpus, as they are."""
        return cls.from_loaded(open_prebuilt(faiss_index, corpus, mmap=mmap), encoder)

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-k passages per query, best first (all queries encoded in one batch)."""
        k = check_k(k)
        if isinstance(queries, str):
            raise InputError("queries: expected a sequence of strings, got a single string")
        queries = list(queries)
        if not queries:
            return []
        if self.encoder is None:
            raise InputError("DenseRetriever: no encoder; use search_vectors or pass an encoder")
        # Rollouts of one question often repeat a query: encode each distinct new string once.
        with self._memory_lock:
            known = {q: self._memory[(q, k)] for q in dict.fromkeys(queries) if (q, k) in self._memory}
            for q in known:
                self._memory.move_to_end((q, k))
        new = [q for q in dict.fromkeys(queries) if q not in known]
        found = dict(zip(new, self.search_vectors(self.encoder.encode_queries(new), k))) if new else {}
        with self._memory_lock:
            for q, hits in found.items():
                self._memory[(q, k)] = hits
            while len(self._memory) > QUERY_MEMORY:
                self._memory.popitem(last=False)
        return [list(known[q] if q in known else found[q]) for q in queries]

    def memory_state(self) -> list:
        """The remembered queries, least recently used first: [query, k, [[id, title, text,
        score], ...]] each (plain lists, so a training checkpoint keeps them: pipeline.rl.run_state)."""
        with self._memory_lock:
            return [[q, k, [[p.id, p.title, p.text, p.score] for p in hits]] for (q, k), hits in self._memory.items()]

    def load_memory_state(self, state: list) -> None:
        """The memory as `memory_state` saw it."""
        memory = OrderedDict(((str(q), int(k)), [Passage(str(i), str(t), str(x), float(s)) for i, t, x, s in hits])
                             for q, k, hits in state)
        with self._memory_lock:
            self._memory = memory

    def forget(self) -> None:
        """Empty the query memory (an evaluation block starts here)."""
        with self._memory_lock:
            self._memory.clear()

    def neighbours(self, texts: Sequence[str], k: int) -> list[list[Passage]]:
        """The k passages nearest to each of the index's own passages `texts` (found by their
        stored vectors: nothing is encoded), best first, the passage itself usually first."""
        k = check_k(k)
        if isinstance(self.passages, JsonlCorpus):
            raise InputError(f"{self.passages.path}: neighbours needs the passages in memory (an index folder)")
        if self._rows is None:
            self._rows = {t: i for i, t in enumerate(self.passages.column("text").to_pylist())}
        missing = [t for t in texts if t not in self._rows]
        if missing:
            raise InputError(f"passages: {len(missing)} text(s) not in the index, e.g. {missing[0][:60]!r}")
        if not texts:
            return []
        try:
            vectors = np.stack([self.index.reconstruct(self._rows[t]) for t in texts])
        except RuntimeError as err:
            raise InputError(f"index {type(self.index).__name__}: cannot return its stored vectors ({err})") from err
        return self.search_vectors(vectors, k)

    def search_vectors(self, vectors: np.ndarray, k: int) -> list[list[Passage]]:
        """Top-k passages for precomputed (n, dim) query vectors, best first."""
        k = check_k(k)
        vectors = np.ascontiguousarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[1] != self.index.d:
            raise InputError(f"vectors: expected shape (n, {self.index.d}), got {vectors.shape}")
        if vectors.shape[0] == 0:
            return []
        with self._search_lock:
            scores, ids = self.index.search(vectors, min(k, self.index.ntotal))
        valid = ids >= 0  # faiss pads with -1 when fewer than k hits exist
        rows = self._take(ids[valid])
        flat_scores = scores[valid].tolist()
        out: list[list[Passage]] = []
        cursor = 0
        for count in valid.sum(axis=1).tolist():
            out.append([Passage(r["id"], r["title"], r["text"], float(s))
                        for r, s in zip(rows[cursor:cursor + count], flat_scores[cursor:cursor + count])])
            cursor += count
        return out
