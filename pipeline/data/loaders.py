"""Loaders for real QA data and corpora that a user drops into data/raw/.

Layout of the raw folder::

    data/raw/qa/<dataset>/<split>.jsonl | .json | .parquet   e.g. qa/nq/train.parquet, qa/hotpotqa/dev.json
    data/raw/corpus/*.jsonl | *.json | *.parquet              e.g. corpus/wiki18.jsonl

Other files in these folders are ignored. Every QA file becomes rows of
(dataset, split, id, question, golden_answers: list[str], source_id); every corpus
file becomes rows of (id, title, text, contents = '"Title"\\ntext').

QA record formats recognised (per record, so a file may mix them):
  - FlashRAG: {"id", "question", "golden_answers": [..]}
  - Search-R1 parquet: question, golden_answers and/or reward_model.ground_truth.target (list or scalar)
  - verl jsonl: prompt [{role, content}], reward_model.ground_truth a plain string, extra_info.question
  - reward_model stored as a JSON string holding {"ground_truth": {"target": ...}}
  - plain JSON list: {question, answer: str | [str]}
  - TriviaQA style: {context: "Question: ...\\nAnswer:", answer, aliases: [..]}
Answers are looked up in this order: golden_answers, reward_model, answer (+ aliases), answers.

Ids: the row's own id, prefixed as "<dataset>_<split>_<id>" so ids stay unique when
datasets are pooled (the file's id is kept in source_id); a row without an id gets
"<dataset>_<split>_<row>" (row: 0-based position in the file). Error messages give
1-based positions: "line N" (jsonl), "item N" (JSON list), "row N" (parquet).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any, Iterator

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.json as pj
from tqdm import tqdm

from pipeline.errors import InputError
from pipeline.retrieval.contents import split_contents_array

QA_COLUMNS = ["dataset", "split", "id", "question", "golden_answers", "source_id"]
CORPUS_COLUMNS = ["id", "title", "text", "contents"]
DATA_SUFFIXES = (".jsonl", ".json", ".parquet")
_TRIVIA_CONTEXT = re.compile(r"^\s*Question:\s*(.*?)\s*(?:\n\s*)?Answer:\s*$", re.DOTALL)


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
    if not isinstance(data, list):
        raise InputError(f"{path}: expected a JSON list of records, got {type(data).__name__}")
    for n, rec in enumerate(data, start=1):
        yield f"{path}, item {n}", rec


def _parquet_records(path: Path) -> Iterator[tuple[str, Any]]:
    try:
        frame = pd.read_parquet(path)
    except Exception as e:  # pyarrow raises several unrelated types for unreadable files
        raise InputError(f"{path}: cannot read as parquet ({e})") from e
    for n, rec in enumerate(frame.to_dict("records"), start=1):
        yield f"{path}, row {n}", rec


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    readers = {".jsonl": _jsonl_records, ".json": _json_records, ".parquet": _parquet_records}
    if path.suffix not in readers:
        raise InputError(f"{path}: unsupported file type {path.suffix!r}; expected one of {DATA_SUFFIXES}")
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    for where, rec in readers[path.suffix](path):
        if not isinstance(rec, dict):
            raise InputError(f"{where}: expected a JSON object (record), got {type(rec).__name__}")
        yield where, rec


# ---------------------------------------------------------------- fields of a QA record


def _present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


def _answer_list(v: Any, where: str, field: str) -> list[str]:
    """A string or a list/array of strings, as a list of strings."""
    if isinstance(v, str):
        return [v]
    if isinstance(v, (list, tuple, np.ndarray)):
        items = list(v)
        for k, item in enumerate(items, start=1):
            if not isinstance(item, str):
                raise InputError(
                    f"{where}: field '{field}' must be a string or a list of strings; "
                    f"element {k} is {type(item).__name__} ({item!r})"
                )
        return items
    raise InputError(
        f"{where}: field '{field}' must be a string or a list of strings, got {type(v).__name__} ({v!r})"
    )


def _reward_answers(rm: Any, where: str) -> list[str] | None:
    if isinstance(rm, str):
        try:
            rm = json.loads(rm)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: field 'reward_model' is a string but not valid JSON ({e.msg})") from e
    if not isinstance(rm, dict) or not _present(rm.get("ground_truth")):
        return None
    gt = rm["ground_truth"]
    if isinstance(gt, dict):
        if not _present(gt.get("target")):
            raise InputError(f"{where}: field 'reward_model.ground_truth' has no 'target'")
        return _answer_list(gt["target"], where, "reward_model.ground_truth.target")
    return _answer_list(gt, where, "reward_model.ground_truth")


def _unique(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _answers(rec: dict, where: str) -> list[str]:
    if _present(rec.get("golden_answers")):
        return _answer_list(rec["golden_answers"], where, "golden_answers")
    if _present(rec.get("reward_model")):
        found = _reward_answers(rec["reward_model"], where)
        if found is not None:
            return found
    if _present(rec.get("answer")):
        answers = _answer_list(rec["answer"], where, "answer")
        if _present(rec.get("aliases")):
            answers += _answer_list(rec["aliases"], where, "aliases")
        return _unique(answers)
    if _present(rec.get("answers")):
        return _answer_list(rec["answers"], where, "answers")
    raise InputError(
        f"{where}: missing answers; expected field 'golden_answers', 'reward_model.ground_truth', "
        f"'answer' or 'answers' (a string or a list of strings)"
    )


def _from_prompt(prompt: Any) -> str | None:
    if isinstance(prompt, np.ndarray):
        prompt = list(prompt)
    if not isinstance(prompt, list):
        return None
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        return None
    content = users[-1]
    # Search-R1 style prompts wrap the question in instructions ending "Question: ...".
    return content.rsplit("Question:", 1)[-1].strip() if "Question:" in content else content


def _question(rec: dict, where: str) -> str:
    if _present(rec.get("question")):
        if not isinstance(rec["question"], str):
            raise InputError(f"{where}: field 'question' must be a string, got {type(rec['question']).__name__}")
        return rec["question"]
    if _present(rec.get("context")):
        m = _TRIVIA_CONTEXT.match(str(rec["context"]))
        if not m:
            raise InputError(f"{where}: field 'context' must look like 'Question: ...\\nAnswer:'")
        return m.group(1)
    extra = rec.get("extra_info")
    if isinstance(extra, dict) and isinstance(extra.get("question"), str):
        return extra["question"]
    from_prompt = _from_prompt(rec.get("prompt"))
    if from_prompt is not None:
        return from_prompt
    raise InputError(
        f"{where}: missing question; expected field 'question' (a string), a TriviaQA 'context', "
        f"'extra_info.question' or a chat 'prompt' with a user message"
    )


# ---------------------------------------------------------------- public loaders


def load_qa_file(path: str | Path, dataset: str, split: str) -> pd.DataFrame:
    """One QA file (format detected from extension and fields) as (dataset, split, id, question, golden_answers, source_id)."""
    path = Path(path)
    rows = []
    first_seen: dict[str, str] = {}
    for row, (where, rec) in enumerate(_records(path)):
        source_id = str(rec["id"]) if _present(rec.get("id")) else ""
        qid = f"{dataset}_{split}_{source_id if source_id else row}"
        if qid in first_seen:
            raise InputError(f"{where}: id {qid!r} repeats {first_seen[qid]}; expected unique ids")
        first_seen[qid] = where
        rows.append((dataset, split, qid, _question(rec, where), _answers(rec, where), source_id))
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
    """One corpus file: FlashRAG jsonl {id, contents} or a JSON/parquet table of {title, text} -> (id, title, text, contents)."""
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
