"""Loaders for real QA data and corpora that a user drops into data/raw/.

Layout of the raw folder::

    data/raw/qa/<dataset>/<split>.jsonl | .json | .parquet   e.g. qa/nq/train.parquet, qa/hotpotqa/dev.json
    data/raw/corpus/*.jsonl | *.json | *.parquet              e.g. corpus/wiki18.jsonl

Other files in these folders are ignored. Every QA file becomes rows of
(dataset, split, id, question, golden_answers: list[str], source_id); every corpus
file becomes rows of (id, title, text, contents = '"Title"\\ntext').

QA files: jsonl, a JSON list of records, TriviaQA's official {"Data": [...]} JSON, or
parquet. Each record's layout is recognised by its fields (FlashRAG, Search-R1, verl,
plain {question, answer}, TriviaQA; see pipeline.data.qa_fields), so a file may mix them;
every alias list a record carries is gold, and a lone answer string only when there is no
list. A Git LFS pointer in place of a data file is named as such.

Ids: the record's own id (`id`, `_id`, `idx`, ..., `extra_info.index`), prefixed as
"<dataset>_<split>_<id>" so ids stay unique when datasets are pooled (the file's id is kept
in source_id); a record without an id gets "<dataset>_<split>_<row>" (row: 0-based position
in the file). Error messages give 1-based positions: "line N" (jsonl), "item N" (JSON
list), "row N" (parquet).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj
from tqdm import tqdm

from pipeline.data.qa_fields import present as _present
from pipeline.data.qa_fields import qa_record
from pipeline.errors import InputError
from pipeline.retrieval.contents import split_contents_array

QA_COLUMNS = ["dataset", "split", "id", "question", "golden_answers", "source_id"]
CORPUS_COLUMNS = ["id", "title", "text", "contents"]
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
LFS_POINTER_PREFIX = b"version https://git-lfs.github.com/spec/"
LFS_POINTER_MAX_BYTES = 1024  # git-lfs writes pointers of about 130 bytes and reads none above 1024

logger = logging.getLogger(__name__)


# ---------------------------------------------------------------- reading records


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start})") from e
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from e


def _jsonl_records(path: Path) -> Iterator[tuple[str, Any]]:
    # split on "\n" only: str.splitlines() would also break inside strings at U+2028 and friends
    for n, line in enumerate(_read_text(path).split("\n"), start=1):
        if not line.strip():
            continue
        try:
            yield f"{path}, line {n}", json.loads(line)
        except json.JSONDecodeError as e:
            raise InputError(f"{path}, line {n}: malformed JSON: {e.msg} (column {e.colno})") from e


def _json_records(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        data = json.loads(_read_text(path))
    except json.JSONDecodeError as e:
        raise InputError(f"{path}: malformed JSON: {e.msg} (line {e.lineno}, column {e.colno})") from e
    if isinstance(data, dict) and isinstance(data.get("Data"), list):
        data = data["Data"]  # TriviaQA's official layout
    if not isinstance(data, list):
        found = f"an object with keys {sorted(data)[:8]}" if isinstance(data, dict) else type(data).__name__
        raise InputError(f"{path}: expected a JSON list of records or TriviaQA's {{\"Data\": [...]}}, got {found}")
    for n, rec in enumerate(data, start=1):
        yield f"{path}, item {n}", rec


def _parquet_records(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several unrelated types for unreadable files
        raise InputError(f"{path}: cannot read as parquet ({e})") from e
    for n, rec in enumerate(frame.to_dict("records"), start=1):
        yield f"{path}, row {n}", rec


def check_not_lfs_pointer(path: Path) -> None:
    """Raise when `path` is a Git LFS pointer (a cloned repository without `git lfs pull`)."""
    try:
        if path.stat().st_size > LFS_POINTER_MAX_BYTES:
            return
        head = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read ({e.strerror or e})") from e
    if not head.startswith(LFS_POINTER_PREFIX):
        return
    fields = dict(line.split(" ", 1) for line in head.decode("utf-8", "replace").splitlines() if " " in line)
    raise InputError(
        f"{path}: a Git LFS pointer ({fields.get('oid', 'unknown oid')}, {fields.get('size', '?')} bytes), "
        f"not the data itself; run `git lfs pull` in the repository it came from, or download the file, "
        f"and put the real file here"
    )


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    readers = {".jsonl": _jsonl_records, ".json": _json_records, ".parquet": _parquet_records}
    if path.suffix not in readers:
        raise InputError(f"{path}: unsupported file type {path.suffix!r}; expected one of {DATA_SUFFIXES}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    check_not_lfs_pointer(path)
    for where, rec in readers[path.suffix](path):
        if not isinstance(rec, dict):
            raise InputError(f"{where}: expected a JSON object (record), got {type(rec).__name__}")
        yield where, rec


# ---------------------------------------------------------------- public loaders


def load_qa_file(path: str | Path, dataset: str, split: str) -> pd.DataFrame:
    """One QA file (format detected from extension and fields) as
    (dataset, split, id, question, golden_answers, source_id)."""
    path = Path(path)
    rows = []
    first_seen: dict[str, str] = {}
    set_aside = 0
    for row, (where, rec) in enumerate(_records(path)):
        parsed = qa_record(rec, where)
        qid = f"{dataset}_{split}_{parsed.source_id if parsed.source_id else row}"
        if qid in first_seen:
            raise InputError(f"{where}: id {qid!r} repeats {first_seen[qid]}; expected unique ids")
        first_seen[qid] = where
        set_aside += bool(parsed.set_aside)
        rows.append((dataset, split, qid, parsed.question, parsed.golden_answers, parsed.source_id))
    if set_aside:
        logger.info("%s: %d of %d records carry an answer string beside an alias list (e.g. a joined "
                    "reward_model.ground_truth); their alias lists are the gold", path, set_aside, len(rows))
    return pd.DataFrame(rows, columns=QA_COLUMNS)


def _split_contents(contents: pd.Series) -> tuple[pd.Series, pd.Series]:
    """'"Title"\\ntext' -> (title, text), by pipeline.retrieval.contents' one rule."""
    title, text = split_contents_array(pa.array(contents.to_numpy(dtype=object), pa.large_string()))
    return title.to_pandas().astype("str"), text.to_pandas().astype("str")


def _corpus_frame(frame: pd.DataFrame, path: Path, where_of) -> pd.DataFrame:
    """Check fields and build (id, title, text, contents); where_of(i) names row i in messages."""
    if "contents" in frame.columns:
        needed = ["contents"]
    elif {"title", "text"} <= set(frame.columns):
        needed = ["title", "text"]
    else:
        raise InputError(f"{path}: corpus records need 'contents' or both 'title' and 'text'; "
                         f"found fields {sorted(map(str, frame.columns))}")
    for col in needed:
        bad = ~frame[col].map(lambda v: isinstance(v, str))
        if bad.any():
            i = int(np.flatnonzero(bad.to_numpy())[0])
            raise InputError(f"{where_of(i)}: field '{col}' must be a string, got {frame[col].iloc[i]!r}")
    if needed == ["contents"]:
        title, text = _split_contents(frame["contents"].astype("str"))
    else:
        title, text = frame["title"].astype("str"), frame["text"].astype("str")
    if "id" in frame.columns and frame["id"].map(_present).all():
        ids = frame["id"].astype("str")
    else:
        ids = pd.Series([f"{path.stem}-{i}" for i in range(len(frame))], dtype="str")
    out = pd.DataFrame({"id": ids.to_numpy(), "title": title.to_numpy(), "text": text.to_numpy()})
    out["contents"] = '"' + out["title"] + '"\n' + out["text"]
    dup = out["id"].duplicated()
    if dup.any():
        i = int(np.flatnonzero(dup.to_numpy())[0])
        raise InputError(f"{where_of(i)}: passage id {out['id'].iloc[i]!r} repeats; expected unique ids")
    return out.astype({c: "str" for c in CORPUS_COLUMNS})


def _fast_jsonl_frame(path: Path) -> pd.DataFrame | None:
    """Read a big jsonl corpus with pyarrow; None when it cannot (then the line-by-line reader explains why)."""
    try:
        frame = pj.read_json(path).to_pandas()
    except (pa.ArrowInvalid, pa.ArrowTypeError, OSError):
        return None
    return frame


def load_corpus_file(path: str | Path) -> pd.DataFrame:
    """One corpus file: FlashRAG jsonl {id, contents} or a JSON/parquet table of {title, text}
    -> (id, title, text, contents)."""
    path = Path(path)
    if path.suffix == ".jsonl" and path.is_file():
        frame = _fast_jsonl_frame(path)
        if frame is not None and {"contents", "title", "text"} & set(frame.columns):
            try:
                return _corpus_frame(frame, path, lambda i: f"{path}, record {i + 1}")
            except InputError:
                pass  # re-read line by line for a message that names the line
    records = list(_records(path))
    frame = pd.DataFrame([rec for _, rec in records])
    return _corpus_frame(frame, path, lambda i: records[i][0])


def convert_jsonl_corpus(path: str | Path, out: str | Path, block_bytes: int = 64 << 20) -> int:
    """A FlashRAG jsonl corpus ({"id", "contents"} lines) -> the corpus parquet (id, title,
    text, contents), streamed a block at a time: bounded memory for wiki-18's 21M passages
    (ids are not checked for repeats here: the prebuilt index numbers passages by line).
    Returns the number of passages; the parquet is written atomically."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    from pipeline.io import atomic_path

    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: corpus file not found")
    schema = pa.schema([(c, pa.string()) for c in CORPUS_COLUMNS])
    count = 0
    try:
        reader = pj.open_json(path, read_options=pj.ReadOptions(block_size=block_bytes))
        with atomic_path(out) as tmp, pq.ParquetWriter(tmp, schema, compression="zstd") as writer:
            for batch in reader:
                for field in ("id", "contents"):
                    if field not in batch.schema.names:
                        raise InputError(f"{path}: field {field!r} missing near passage {count + 1}; "
                                         f"expected lines {{\"id\", \"contents\"}}")
                contents = pc.cast(batch.column("contents"), pa.string())
                if contents.null_count:
                    raise InputError(f"{path}: a 'contents' is null near passage {count + 1}")
                title, text = split_contents_array(contents)
                writer.write_table(pa.table([pc.cast(batch.column("id"), pa.string()), title, text, contents],
                                            schema=schema))
                count += batch.num_rows
    except (pa.ArrowInvalid, pa.ArrowTypeError) as err:
        raise InputError(f"{path}: unreadable JSON lines near passage {count + 1} ({err})") from err
    return count


def _data_files(folder: Path, pattern: str) -> list[Path]:
    return sorted(p for p in folder.glob(pattern) if p.suffix in DATA_SUFFIXES and not p.name.startswith("."))


def load_raw_dir(raw_dir: str | Path) -> tuple[pd.DataFrame, pd.DataFrame]:
    """All QA files under raw_dir/qa/<dataset>/<split>.* and corpus files under raw_dir/corpus/.

    Returns (questions, passages); passages is empty (with its columns) when there is no corpus.
    """
    raw = Path(raw_dir)
    if not raw.is_dir():
        raise InputError(f"{raw}: raw data folder not found; expected {raw}/qa/<dataset>/<split>.jsonl|json|parquet")
    qa_files = _data_files(raw / "qa", "*/*")
    if not qa_files:
        raise InputError(f"{raw / 'qa'}: no QA files found; expected qa/<dataset>/<split>.jsonl|json|parquet")
    seen: dict[tuple[str, str], Path] = {}
    frames = []
    for path in tqdm(qa_files, desc="load QA files", unit="file"):
        key = (path.parent.name, path.stem)
        if key in seen:
            raise InputError(f"{path}: {key[0]}/{key[1]} is also given by {seen[key]}; keep one file per split")
        seen[key] = path
        frames.append(load_qa_file(path, dataset=key[0], split=key[1]))
    questions = pd.concat(frames, ignore_index=True)
    corpus_files = _data_files(raw / "corpus", "*")
    passages = [load_corpus_file(p) for p in tqdm(corpus_files, desc="load corpus files", unit="file")]
    if not passages:
        return questions, pd.DataFrame({c: pd.Series(dtype="str") for c in CORPUS_COLUMNS})
    corpus = pd.concat(passages, ignore_index=True)
    dup = corpus["id"].duplicated()
    if dup.any():
        raise InputError(f"{raw / 'corpus'}: passage id {corpus['id'][dup].iloc[0]!r} appears in more than one "
                         f"corpus file; expected ids unique across files")
    return questions, corpus
