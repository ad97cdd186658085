"""data/splits -> verl's RL dataset files (parquet rows for verl's RLHFDataset).

One row per question: `prompt` (a chat message; verl needs one, our agent loop builds its own
role prompts), `data_source` (the dataset), `reward_model` (the gold answers, for verl's logs)
and `extra_info`: question_id, question, golden_answers, dataset, split ("train" or "dev": dev
rows are rolled out like the in-process trainer's dev evaluation) and index.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.agents.workflows import question_rows
from pipeline.errors import InputError
from pipeline.io import read_parquet, write_parquet
from pipeline.paths import Paths


def verl_rows(questions: pd.DataFrame, split: str) -> pd.DataFrame:
    """verl dataset rows of a splits table (columns id or question_id, question, golden_answers, dataset)."""
    if split not in ("train", "dev"):
        raise InputError(f"split: expected 'train' or 'dev', got {split!r}")
    rows = question_rows(questions)
    return pd.DataFrame({
        "data_source": [r["dataset"] for r in rows],
        "prompt": [[{"role": "user", "content": r["question"]}] for r in rows],
        "ability": ["qa"] * len(rows),
        "reward_model": [{"style": "rule", "ground_truth": list(r["golden_answers"])} for r in rows],
        "extra_info": [{**r, "split": split, "index": i} for i, r in enumerate(rows)],
    })


def verl_data_dir(root: Path) -> Path:
    return Path(root) / "data" / "verl"


def write_verl_datasets(root: Path, dev_questions: int) -> dict[str, Path]:
    """data/verl/{train,dev}.parquet from data/splits (dev: its first `dev_questions`, as the
    in-process trainer evaluates)."""
    out = {}
    for split, limit in (("train", None), ("dev", dev_questions)):
        table = read_parquet(Paths(root).split(split), "the `splits` stage")
        out[split] = verl_data_dir(root) / f"{split}.parquet"
        write_parquet(out[split], verl_rows(table if limit is None else table.iloc[:limit], split))
    return out
