"""What the report reads from disk: evaluation records, split sizes, the base model's config."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from pipeline.errors import InputError
from pipeline.eval.records import require_columns
from pipeline.io import parquet_rows, read_parquet
from pipeline.paths import eval_dir, model_dir
from pipeline.systems import SYSTEMS

RECORD_COLUMNS = (
    "system", "question_id", "dataset", "run", "strict_correct", "flexible_correct",
    "format_failure", "search_actions", "input_tokens", "output_tokens",
    "has_subtask_and_report", "has_final_answer", "forced_answer",
)
# the funnel's per-workflow columns (pipeline.eval.funnel), read where the records have them
FUNNEL_COLUMNS = (
    "workflow", "family", "n_hops", "hop_retrieved", "hop_reported", "hop_handed", "answer_retrieved",
    "answer_reported", "handed", "searcher_calls", "searcher_calls_read", "searcher_calls_kept", "leader_waves",
    "bridge_used",
)
# what the facts-read measure (pipeline.eval.stated_reads) recomputes from, where the records have it
RAW_FUNNEL_COLUMNS = ("golden_answers", "searcher_tasks", "searcher_reports", "searcher_passage_ids")
MODEL_KEYS = ("model_type", "hidden_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "intermediate_size", "vocab_size", "max_position_embeddings",
              "torch_dtype", "dtype")


@dataclass
class LoadedRecords:
    records: pd.DataFrame  # every present system's records, systems in pipeline.systems order
    present: list[str]
    missing: list[str]
    funnel: list[str] = field(default_factory=list)  # present systems whose records have the funnel's columns
    stated: list[str] = field(default_factory=list)  # those whose records also have the facts-read columns


def load_records(root: Path) -> LoadedRecords:
    """Read data/eval/<system>/records.parquet of every system that has one: the columns every
    report needs, and the funnel's where a system's records have them."""
    frames, present, missing, funnel = [], [], [], []
    for s in SYSTEMS:
        path = eval_dir(root, s.name) / "records.parquet"
        if not path.is_file():
            missing.append(s.name)
            continue
        frame = read_parquet(path, f"the `evaluate@{s.name}` stage")
        try:
            require_columns(frame, RECORD_COLUMNS)
        except InputError as e:
            raise InputError(f"{path}: {e}") from None
        systems = set(frame["system"].unique())
        if systems != {s.name}:
            raise InputError(f"{path}: column 'system' holds {sorted(systems)}; expected only {s.name!r}")
        columns = list(RECORD_COLUMNS)
        if all(c in frame.columns for c in FUNNEL_COLUMNS):
            columns += list(FUNNEL_COLUMNS)
            funnel.append(s.name)
            if all(c in frame.columns for c in RAW_FUNNEL_COLUMNS):
                columns += list(RAW_FUNNEL_COLUMNS)
        frames.append(frame[columns])
        present.append(s.name)
    records = pd.concat(frames, ignore_index=True) if frames else pd.DataFrame(columns=list(RECORD_COLUMNS))
    loaded = LoadedRecords(records, present, missing, funnel)
    return with_stated_reads(root, loaded)


def with_stated_reads(root: Path, loaded: LoadedRecords) -> LoadedRecords:
    """`loaded` with the facts-read columns (pipeline.eval.stated_reads) on the records of the funnel
    systems that keep the raw columns, when the test split has hops (the synthetic world); the
    index's passages are read only then, and only the ones the records name."""
    from pipeline.eval.stated_reads import COLUMNS, hops_by_question, index_passages, stated_columns

    systems = [s for s in loaded.funnel if all(c in loaded.records.columns for c in RAW_FUNNEL_COLUMNS)
               and loaded.records.loc[loaded.records["system"] == s, "searcher_passage_ids"].notna().all()]
    test = root / "data" / "splits" / "test.parquet"
    if not systems or not test.is_file():
        return loaded
    split = read_parquet(test, "the `splits` stage")
    hops = hops_by_question(split, str(test))
    if not any(hops.values()):
        return loaded
    rows = loaded.records["system"].isin(systems)
    ids = {str(i) for v in loaded.records.loc[rows, "searcher_passage_ids"] for call in v for i in call}
    path = root / "data" / "index" / "passages.parquet"
    table = read_parquet(path, "the `index` stage")
    table = table[table["id"].astype(str).isin(ids)]
    stated = stated_columns(loaded.records[rows], hops, index_passages(table, str(path)))
    records = loaded.records.copy()
    positions = rows.to_numpy().nonzero()[0]
    for column in COLUMNS:
        values: list[object] = [None] * len(records)
        for position, value in zip(positions, stated[column]):
            values[position] = value
        records[column] = values
    return LoadedRecords(records, loaded.present, loaded.missing, loaded.funnel, systems)


def split_sizes(root: Path) -> dict[str, int]:
    """Row counts of data/splits/{train,dev,test}.parquet (absent splits are left out)."""
    sizes = {}
    for name in ("train", "dev", "test"):
        path = root / "data" / "splits" / f"{name}.parquet"
        if path.is_file():
            sizes[name] = parquet_rows(path, "the `splits` stage")
    return sizes


def model_summary(root: Path, weights: str = "base") -> dict[str, object]:
    """Folder and the main config.json fields of a model under data/models/."""
    folder = model_dir(root, weights)
    summary: dict[str, object] = {"folder": str(folder.relative_to(root))}
    config = folder / "config.json"
    if not config.is_file():
        summary["status"] = "config.json not found"
        return summary
    try:
        data = json.loads(config.read_text())
    except ValueError as e:
        raise InputError(f"{config}: not valid JSON: {e}") from None
    summary.update({k: data[k] for k in MODEL_KEYS if k in data})
    parameters = parameter_count(folder)
    if parameters:
        summary["parameters"] = parameters
    return summary


def parameter_count(folder: Path) -> int | None:
    """Parameters in the folder's safetensors files, read from their headers (no weights
    loaded); None without any."""
    from safetensors import safe_open

    files = sorted(folder.glob("*.safetensors"))
    if not files:
        return None
    total = 0
    for path in files:
        with safe_open(str(path), framework="numpy") as f:
            for key in f.keys():
                total += math.prod(f.get_slice(key).get_shape())
    return total


DEDUP_REASONS = ("test_equals_train", "duplicate_in_split")  # the counts the report states


def dedup_counts(root: Path) -> dict[str, int] | None:
    """{reason: questions removed} of data/splits/dedup_report.json's `removed` mapping for the
    reasons the report states; None without the file."""
    path = root / "data" / "splits" / "dedup_report.json"
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text())
    except ValueError as e:
        raise InputError(f"{path}: not valid JSON: {e}") from None
    removed = data.get("removed") if isinstance(data, dict) else None
    if not isinstance(removed, dict):
        raise InputError(f"{path}: field 'removed': expected a mapping of reason to count (the `splits` stage "
                         f"writes it), got {removed!r}")
    out = {}
    for reason in DEDUP_REASONS:
        value = removed.get(reason)
        if isinstance(value, bool) or not isinstance(value, int) or value < 0:
            raise InputError(f"{path}: field 'removed.{reason}': expected a count, got {value!r}")
        out[reason] = value
    return out
