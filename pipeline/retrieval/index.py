"""Inner-product faiss indexes (flat, or IVF for very large corpora): build ours, load
ours, or open a FlashRAG one."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import faiss
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pa_json
from tqdm.auto import tqdm

from pipeline.errors import InputError
from pipeline.io import atomic_dir, read_parquet
from pipeline.retrieval.contents import join_contents, split_contents_array
from pipeline.retrieval.encoders import Encoder
from pipeline.retrieval.faiss_file import read_faiss_index, read_flat_ip_index
from pipeline.retrieval.faiss_index import new_index, set_nprobe, to_build_device, to_cpu, to_search_device, train
from pipeline.retrieval.index_spec import IndexSpec
from pipeline.retrieval.jsonl_corpus import JsonlCorpus

INDEX_FILE = "index.faiss"
PASSAGES_FILE = "passages.parquet"
META_FILE = "index.json"
PASSAGE_COLUMNS = ("id", "title", "text")


@dataclass
class LoadedIndex:
    """A faiss index and its passages table, row i of the table = vector i."""

    index: Any
    passages: pa.Table
    meta: dict = field(default_factory=dict)


def _check_passages(passages: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in PASSAGE_COLUMNS if c not in passages.columns]
    if missing:
        raise InputError(f"passages: missing column(s) {missing}; expected {list(PASSAGE_COLUMNS)}")
    frame = passages[list(PASSAGE_COLUMNS)].astype(str).reset_index(drop=True)
    dupes = frame["id"][frame["id"].duplicated()]
    if len(dupes):
        raise InputError(f"passages: column 'id' must be unique; duplicated e.g. {dupes.iloc[0]!r}")
    return frame


def _encode(encoder: Encoder, contents: list[str], batch_size: int, desc: str):
    for start in tqdm(range(0, len(contents), batch_size), desc=desc, unit="batch", leave=False):
        yield np.ascontiguousarray(encoder.encode_passages(contents[start:start + batch_size]), dtype=np.float32)


def _spec_meta(spec: IndexSpec, trained_on: int) -> dict:
    """index.json entries beyond the flat defaults (a default flat index keeps its old meta)."""
    meta: dict[str, Any] = {"gpu_fp16": True} if spec.gpu_fp16 else {}
    if spec.kind == "flat":
        return meta
    meta.update(kind=spec.kind, nlist=spec.nlist, nprobe=spec.nprobe, train_size=trained_on,
                index_type="IndexIVFFlat" if spec.kind == "ivf" else "IndexIVFPQ")
    if spec.kind == "ivfpq":
        meta.update(pq_m=spec.pq_m, pq_bits=spec.pq_bits)
    return meta


def build_index(passages: pd.DataFrame, encoder: Encoder, out_dir: str | Path,
                batch_size: int = 64, spec: IndexSpec | None = None, seed: int = 0,
                encoder_name: str | None = None) -> dict:
    """Encode '"Title"\ntext' of every passage (E5 passage prefix) into the index `spec`
    describes (default: IndexFlatIP). IVF kinds first train their cells on `spec.train_count`
    passages sampled with `seed` (encoded twice: once to train, once to add).

    Writes out_dir/{index.faiss, passages.parquet, index.json} atomically; returns the meta.
    index.json names the encoder `encoder_name` (default encoder.name): give it relative to the
    project root (encoders.encoder_ref) so that other checkouts can open the index."""
    spec = spec or IndexSpec()
    frame = _check_passages(passages)
    if frame.empty:
        raise InputError("passages: expected at least one row")
    contents = [join_contents(t, x) for t, x in zip(frame["title"], frame["text"])]
    spec.check_data(len(contents), encoder.dim)
    cpu_index = new_index(spec, encoder.dim)
    index = to_build_device(cpu_index)
    trained_on = 0
    if spec.kind != "flat":
        picks = np.sort(np.random.default_rng(seed).choice(len(contents), spec.train_count(len(contents)),
                                                           replace=False))
        sample = np.empty((len(picks), encoder.dim), dtype=np.float32)
        row = 0
        for vectors in _encode(encoder, [contents[i] for i in picks], batch_size, "encode training sample"):
            sample[row:row + len(vectors)] = vectors
            row += len(vectors)
        train(index, sample)
        trained_on = len(sample)
        del sample
    for vectors in _encode(encoder, contents, batch_size, "encode passages"):
        index.add(vectors)
    index = to_cpu(index, cpu_index)
    if spec.nprobe is not None:
        set_nprobe(index, spec.nprobe)
    meta = {"encoder": encoder_name or encoder.name, "dim": int(encoder.dim), "count": int(index.ntotal),
            "metric": "ip", "index_type": "IndexFlatIP", **_spec_meta(spec, trained_on)}
    with atomic_dir(out_dir) as tmp:
        faiss.write_index(index, str(tmp / INDEX_FILE))
        frame.to_parquet(tmp / PASSAGES_FILE, index=False, compression="zstd")
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def read_meta(index_dir: str | Path) -> dict:
    path = Path(index_dir) / META_FILE
    if not path.is_file():
        raise InputError(f"{path}: missing; expected an index folder from the `index` stage")
    try:
        meta = json.loads(path.read_text())
    except json.JSONDecodeError as err:
        raise InputError(f"{path}: invalid JSON ({err})") from err
    if not isinstance(meta, dict):
        raise InputError(f"{path}: expected a JSON object")
    return meta


def write_prebuilt_meta(out_dir: str | Path, faiss_index: str, corpus: str, encoder: str, root: str | Path,
                        encoder_dim: int, gpu_fp16: bool = False) -> dict:
    """An index folder that points at a prebuilt index and its corpus (paths relative to
    `root`, as in params) after checking that they open and agree with each other and with
    the encoder's dimension; returns the meta."""
    root = Path(root)
    loaded = open_prebuilt(root / faiss_index, root / corpus)
    if loaded.index.d != encoder_dim:
        raise InputError(f"{root / faiss_index}: vectors of dimension {loaded.index.d}, but encoder {encoder!r} "
                         f"makes {encoder_dim}; expected the encoder the index was built with")
    meta = {"kind": "prebuilt", "faiss_index": faiss_index, "corpus": corpus, "encoder": encoder,
            "dim": loaded.meta["dim"], "count": loaded.meta["count"], "metric": "ip",
            "index_type": loaded.meta["index_type"], **({"gpu_fp16": True} if gpu_fp16 else {})}
    with atomic_dir(out_dir) as tmp:
        (tmp / META_FILE).write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")
    return meta


def load_index(index_dir: str | Path, root: str | Path | None = None) -> LoadedIndex:
    """Open a folder written by build_index (on GPU when faiss-gpu sees one), or one that
    points at a prebuilt index (its paths taken from `root`, default the working directory)."""
    index_dir = Path(index_dir)
    for name in (INDEX_FILE, PASSAGES_FILE, META_FILE):
        if not (index_dir / name).is_file() and not (index_dir / META_FILE).is_file():
            raise InputError(f"{index_dir / name}: missing; expected an index folder from build_index")
    meta = read_meta(index_dir)
    if meta.get("kind") == "prebuilt":
        base = Path(root or ".")
        loaded = open_prebuilt(base / str(meta.get("faiss_index")), base / str(meta.get("corpus")),
                               fp16=bool(meta.get("gpu_fp16", False)))
        if _meta_int(meta, "count", index_dir) != loaded.index.ntotal or \
                _meta_int(meta, "dim", index_dir) != loaded.index.d:
            raise InputError(f"{index_dir / META_FILE}: count/dim {meta.get('count')}/{meta.get('dim')} do not match "
                             f"{meta.get('faiss_index')} ({loaded.index.ntotal}/{loaded.index.d}); "
                             "rerun the index stage")
        return LoadedIndex(loaded.index, loaded.passages, meta)
    for name in (INDEX_FILE, PASSAGES_FILE):
        if not (index_dir / name).is_file():
            raise InputError(f"{index_dir / name}: missing; expected an index folder from build_index")
    index = read_faiss_index(index_dir / INDEX_FILE)
    passages = pa.Table.from_pandas(read_parquet(index_dir / PASSAGES_FILE, "the `index` stage"),
                                    preserve_index=False)
    _check_counts(index, passages, index_dir / INDEX_FILE, index_dir / PASSAGES_FILE)
    if "count" in meta and _meta_int(meta, "count", index_dir) != index.ntotal:
        raise InputError(f"{index_dir / META_FILE}: count {meta['count']} != {index.ntotal} vectors")
    if "dim" in meta and _meta_int(meta, "dim", index_dir) != index.d:
        raise InputError(f"{index_dir / META_FILE}: dim {meta['dim']} != index dimension {index.d}")
    if meta.get("nprobe") is not None:
        nlist = int(getattr(faiss.extract_index_ivf(index), "nlist", 0))
        if not 1 <= _meta_int(meta, "nprobe", index_dir) <= nlist:
            raise InputError(f"{index_dir / META_FILE}: nprobe {meta['nprobe']} outside 1..nlist ({nlist})")
        set_nprobe(index, int(meta["nprobe"]))
    return LoadedIndex(to_search_device(index, fp16=bool(meta.get("gpu_fp16", False))), passages, meta)


def _meta_int(meta: dict, key: str, index_dir: Path) -> int:
    value = meta.get(key)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"{index_dir / META_FILE}: field {key!r} is {value!r}; expected an integer "
                         f"(rerun the `index` stage)")
    return value


def _check_counts(index: Any, passages: Any, index_path: Path, passages_path: Path) -> None:
    if index.ntotal == 0:
        raise InputError(f"{index_path}: no vectors; expected an index of at least one passage")
    if index.ntotal != passages.num_rows:
        raise InputError(f"{index_path}: {index.ntotal} vectors but {passages_path} has "
                         f"{passages.num_rows} passages; expected equal counts")


def read_flashrag_corpus(corpus_jsonl_path: str | Path) -> pa.Table:
    """FlashRAG corpus lines {"id", "contents": '"Title"\\ntext'} -> table (id, title, text)."""
    path = Path(corpus_jsonl_path)
    if not path.is_file():
        raise InputError(f"{path}: corpus file not found")
    try:
        raw = pa_json.read_json(path)
    except pa.ArrowInvalid as err:
        _locate_bad_line(path)
        raise InputError(f"{path}: unreadable JSON lines ({err})") from err
    for col in ("id", "contents"):
        if col not in raw.column_names:
            raise InputError(f"{path}: field {col!r} missing; expected lines {{\"id\", \"contents\"}}")
    contents = raw.column("contents")
    if not pa.types.is_string(contents.type) and not pa.types.is_large_string(contents.type):
        raise InputError(f"{path}: field 'contents' has type {contents.type}; expected string")
    if contents.null_count:
        raise InputError(f"{path}: {contents.null_count} line(s) have a null 'contents'")
    title, text = split_contents_array(contents)
    return pa.table({"id": pc.cast(raw.column("id"), pa.string()), "title": title, "text": text})


def _locate_bad_line(path: Path) -> None:
    """Raise an InputError naming the first line that is not a JSON object with id/contents."""
    with path.open(encoding="utf-8") as handle:
        for line_no, line in enumerate(handle, 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as err:
                raise InputError(f"{path}:{line_no}: invalid JSON ({err.msg})") from err
            if not isinstance(row, dict) or "id" not in row or "contents" not in row:
                raise InputError(f"{path}:{line_no}: expected an object with 'id' and 'contents'")


def open_flashrag_index(index_path: str | Path, corpus_jsonl_path: str | Path) -> LoadedIndex:
    """Open a FlashRAG/Search-R1 faiss index (e.g. e5_Flat.index) with its wiki-18 corpus."""
    index_path = Path(index_path)
    if not index_path.is_file():
        raise InputError(f"{index_path}: faiss index file not found")
    passages = read_flashrag_corpus(corpus_jsonl_path)
    index = read_faiss_index(index_path)
    _check_counts(index, passages, index_path, Path(corpus_jsonl_path))
    meta = {"encoder": "intfloat/e5-base-v2", "dim": int(index.d), "count": int(index.ntotal),
            "metric": "ip", "source": "flashrag"}
    return LoadedIndex(to_search_device(index), passages, meta)


def open_prebuilt(index_path: str | Path, corpus_path: str | Path, mmap: bool = True,
                  fp16: bool = False) -> LoadedIndex:
    """A Search-R1 / FlashRAG flat inner-product index (e.g. e5_Flat.index; other kinds are
    refused, see faiss_file) and its jsonl corpus, served as they are: the index
    memory-mapped, the corpus read through an offset table."""
    index = read_flat_ip_index(index_path, mmap=mmap)  # before the corpus: its scan takes minutes at 14 GB
    corpus = JsonlCorpus(corpus_path)
    _check_counts(index, corpus, Path(index_path), Path(corpus_path))
    meta = {"dim": int(index.d), "count": int(index.ntotal), "metric": "ip", "source": "prebuilt",
            "index_type": type(index).__name__}
    return LoadedIndex(to_search_device(index, fp16=fp16), corpus, meta)
