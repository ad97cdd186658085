"""Dedup, leakage removal and seeded sampling of the train / dev / test splits.

The pooled question table (loaders or the synthetic world) goes in; three frames
and a report of what was removed and why come out. The grouping, anti-joins and
counts run in DuckDB over a slim copy of the table (row number, dataset, split,
id, normalised question); the list-valued answer column never enters SQL.

Pools: the training pool is the `train_split` rows of `train_datasets`; the test
pool of a dataset is its rows of the first split in `test_splits` it has (test,
else dev: HotpotQA, 2Wiki and MuSiQue publish dev as their test). Order of removal,
each row counted once under the first reason that applies:
  empty                            no question text or no non-blank answer
  duplicate_in_split               same norm_question as an earlier id of its dataset/split
  duplicate_across_train_datasets  same norm_question as a training row of a dataset listed
                                   earlier in train_datasets
  test_equals_train                a test-pool row whose norm_question is a training question
Then, per dataset, exactly test_quotas[dataset] test questions are drawn; dev_size
dev questions are drawn from the training pool and leave it.
"""

from __future__ import annotations

import re
import string
import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import duckdb
import numpy as np
import pandas as pd

from pipeline.data.normalize import normalize_question
from pipeline.errors import InputError

REQUIRED_COLUMNS = ["dataset", "split", "id", "question", "golden_answers"]
OUTPUT_COLUMNS = ["dataset", "split", "id", "question", "golden_answers", "norm_question"]
EXTRA_COLUMNS = ["family", "hops"]
REASONS = ("empty", "duplicate_in_split", "duplicate_across_train_datasets", "test_equals_train")

_DROP_PUNCT = str.maketrans("", "", string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b")

_STATUS_SQL = """
WITH q AS (
    SELECT s.rid, s.dataset, s.split, s.id, s.norm, s.empty, p.pool, p.rank
    FROM slim s LEFT JOIN pools p ON s.dataset = p.dataset AND s.split = p.split
),
live AS (
    SELECT rid, pool, norm, dataset, id, rank,
           ROW_NUMBER() OVER (PARTITION BY dataset, split, norm ORDER BY id) AS k_split
    FROM q WHERE pool IS NOT NULL AND NOT empty
),
train_ranked AS (
    SELECT rid, ROW_NUMBER() OVER (PARTITION BY norm ORDER BY rank, id) AS k_train
    FROM live WHERE pool = 'train' AND k_split = 1
),
train_norms AS (SELECT DISTINCT norm FROM live WHERE pool = 'train')
SELECT q.rid, q.dataset, q.split, q.id, q.norm, q.pool,
    CASE
        WHEN q.pool IS NULL THEN 'unused'
        WHEN q.empty THEN 'empty'
        WHEN l.k_split > 1 THEN 'duplicate_in_split'
        WHEN q.pool = 'train' AND t.k_train > 1 THEN 'duplicate_across_train_datasets'
        WHEN q.pool = 'test' AND q.norm IN (SELECT norm FROM train_norms) THEN 'test_equals_train'
        ELSE 'kept'
    END AS status
FROM q
LEFT JOIN live l ON q.rid = l.rid
LEFT JOIN train_ranked t ON q.rid = t.rid
ORDER BY q.rid
"""

_COUNTS_SQL = """
SELECT coalesce(pool, 'unused') AS pool, dataset, split, status, count(*) AS n
FROM status GROUP BY ALL ORDER BY ALL
"""

_OVERLAP_SQL = """
SELECT a.split AS a, b.split AS b, count(*) AS n
FROM (SELECT DISTINCT split, norm FROM final) a
JOIN (SELECT DISTINCT split, norm FROM final) b ON a.norm = b.norm AND a.split < b.split
GROUP BY ALL
"""


@dataclass
class SplitResult:
    train: pd.DataFrame
    dev: pd.DataFrame
    test: pd.DataFrame
    report: dict[str, Any] = field(default_factory=dict)


def normalize_questions(texts: Sequence[Any]) -> list[str]:
    """normalize_question over a column, with a fast path for ASCII text (same result; non-strings -> "")."""
    out = []
    for t in texts:
        if not isinstance(t, str):
            out.append("")
        elif t.isascii():  # unicode folding is the identity here; translate() replaces the per-char loop
            out.append(" ".join(_ARTICLES.sub(" ", t.lower().translate(_DROP_PUNCT)).split()))
        else:
            out.append(normalize_question(t))
    return out


def _check_input(questions: pd.DataFrame) -> None:
    missing = [c for c in REQUIRED_COLUMNS if c not in questions.columns]
    if missing:
        raise InputError(f"questions table: missing column(s) {missing}; expected {REQUIRED_COLUMNS}")
    dup = questions["id"].duplicated()
    if dup.any():
        row = questions[dup].iloc[0]
        raise InputError(
            f"questions table: id {row['id']!r} (dataset {row['dataset']!r}, split {row['split']!r}) "
            f"appears more than once; expected unique ids"
        )


def _has_answer(answers: Any) -> bool:
    if answers is None or isinstance(answers, (str, float)):
        return isinstance(answers, str) and bool(answers.strip())
    return any(isinstance(a, str) and a.strip() for a in answers)


def _pools(questions: pd.DataFrame, train_datasets: Sequence[str], test_quotas: Mapping[str, int],
           train_split: str, test_splits: Sequence[str]) -> tuple[pd.DataFrame, dict[str, str]]:
    """(dataset, split, pool, rank) rows naming the training and test pools, and each dataset's test source split."""
    present = set(zip(questions["dataset"], questions["split"]))
    rows = []
    for ds in train_datasets:
        if (ds, train_split) not in present:
            raise InputError(f"questions table: training dataset {ds!r} has no {train_split!r} rows")
        rows.append((ds, train_split, "train", len(rows)))
    sources: dict[str, str] = {}
    for ds in sorted(test_quotas):
        split = next((s for s in test_splits if (ds, s) in present), None)
        if split is None:
            raise InputError(f"questions table: dataset {ds!r} has no rows in any of the test splits "
                             f"{list(test_splits)}")
        if (ds, split) in {(d, s) for d, s, pool, _ in rows if pool == "train"}:
            raise InputError(f"dataset {ds!r}: split {split!r} cannot be both its training and its test pool")
        sources[ds] = split
        rows.append((ds, split, "test", len(rows)))
    return pd.DataFrame(rows, columns=["dataset", "split", "pool", "rank"]), sources


def _rng(seed: int, label: str) -> np.random.Generator:
    """A generator per (seed, label): one dataset's quota never shifts another's draw."""
    return np.random.default_rng([seed, zlib.crc32(label.encode())])


def _draw(candidates: pd.DataFrame, n: int, rng: np.random.Generator) -> pd.DataFrame:
    """n rows without replacement, from candidates sorted by id (so the draw is reproducible)."""
    ordered = candidates.sort_values("id", kind="stable")
    return ordered.iloc[np.sort(rng.choice(len(ordered), size=n, replace=False))]


def _frame(questions: pd.DataFrame, picked: pd.DataFrame, split: str) -> pd.DataFrame:
    """Output rows of one split: contract columns (+ family, hops), sorted by dataset and id."""
    rows = questions.iloc[picked["rid"].to_numpy()]
    out = pd.DataFrame({
        "dataset": rows["dataset"].astype("str").to_numpy(),
        "split": split,
        "id": rows["id"].astype("str").to_numpy(),
        "question": rows["question"].astype("str").to_numpy(),
        "golden_answers": [[str(a) for a in ([ans] if isinstance(ans, str) else ans)]
                           for ans in rows["golden_answers"]],
        "norm_question": picked["norm"].to_numpy(),
    })
    for col in EXTRA_COLUMNS:
        if col in questions.columns:
            out[col] = rows[col].to_numpy()
    out = out.astype({"dataset": "str", "split": "str", "id": "str", "question": "str", "norm_question": "str"})
    return out.sort_values(["dataset", "id"], kind="stable").reset_index(drop=True)


def make_splits(
    questions: pd.DataFrame,
    *,
    train_datasets: Sequence[str],
    test_quotas: Mapping[str, int],
    dev_size: int,
    seed: int,
    train_split: str = "train",
    test_splits: Sequence[str] = ("test", "dev"),
) -> SplitResult:
    """Dedup, remove test/train leakage, and draw the test quotas and the dev split (see module doc)."""
    _check_input(questions)
    pools, sources = _pools(questions, train_datasets, test_quotas, train_split, test_splits)
    norms = normalize_questions(questions["question"].tolist())
    slim = pd.DataFrame({
        "rid": np.arange(len(questions), dtype=np.int64),
        "dataset": questions["dataset"].astype("str").to_numpy(),
        "split": questions["split"].astype("str").to_numpy(),
        "id": questions["id"].astype("str").to_numpy(),
        "norm": norms,
        "empty": [not n or not _has_answer(a) for n, a in zip(norms, questions["golden_answers"])],
    })
    con = duckdb.connect()
    con.register("slim", slim)
    con.register("pools", pools)
    status = con.execute(_STATUS_SQL).df()
    con.register("status", status)
    counts = con.execute(_COUNTS_SQL).df()

    kept = status[status["status"] == "kept"]
    test_parts = []
    for ds in sorted(test_quotas):
        quota = int(test_quotas[ds])
        candidates = kept[(kept["pool"] == "test") & (kept["dataset"] == ds)]
        if len(candidates) < quota:
            raise InputError(
                f"test pool of dataset {ds!r} ({sources[ds]} split) has {len(candidates)} questions after "
                f"dedup and leakage removal; test_quotas[{ds!r}] asks for {quota}"
            )
        test_parts.append(_draw(candidates, quota, _rng(seed, ds)))
    train_pool = kept[kept["pool"] == "train"].sort_values(["dataset", "id"], kind="stable")
    if not 0 <= dev_size < len(train_pool):
        raise InputError(f"dev_size {dev_size} must be at least 0 and below the training pool size {len(train_pool)}")
    dev_pick = _draw(train_pool, dev_size, _rng(seed, "dev"))
    train_pick = train_pool[~train_pool["rid"].isin(dev_pick["rid"])]
    test_pick = pd.concat(test_parts) if test_parts else train_pool.iloc[:0]

    result = SplitResult(
        train=_frame(questions, train_pick, "train"),
        dev=_frame(questions, dev_pick, "dev"),
        test=_frame(questions, test_pick, "test"),
    )
    final = pd.concat([f[["split", "norm_question"]] for f in (result.train, result.dev, result.test)])
    con.register("final", final.rename(columns={"norm_question": "norm"}))
    overlap = {f"{r.a}_{r.b}": int(r.n) for r in con.execute(_OVERLAP_SQL).df().itertuples()}
    con.close()
    if any(overlap.values()):
        raise RuntimeError(f"splits share normalised questions after dedup: {overlap}")
    result.report = _report(questions, counts, sources, result, seed, dev_size, test_quotas)
    return result


def _report(questions: pd.DataFrame, counts: pd.DataFrame, sources: dict[str, str], result: SplitResult,
            seed: int, dev_size: int, test_quotas: Mapping[str, int]) -> dict[str, Any]:
    removed = counts[counts["status"].isin(REASONS)]
    by_dataset: dict[str, dict[str, int]] = {}
    for r in removed.itertuples():
        by_dataset.setdefault(r.dataset, {}).setdefault(r.status, 0)
        by_dataset[r.dataset][r.status] += int(r.n)
    kept = counts[counts["status"] == "kept"]
    unused = counts[counts["status"] == "unused"]
    return {
        "seed": seed,
        "input_rows": len(questions),
        "removed": {reason: int(removed.loc[removed["status"] == reason, "n"].sum()) for reason in REASONS},
        "removed_by_dataset": by_dataset,
        "unused_rows": {f"{r.dataset}/{r.split}": int(r.n) for r in unused.itertuples()},
        "test_sources": sources,
        "pool_sizes_after_dedup": {
            pool: {r.dataset: int(r.n) for r in kept[kept["pool"] == pool].itertuples()} for pool in ("train", "test")
        },
        "test_quotas": {k: int(v) for k, v in sorted(test_quotas.items())},
        "dev_size": dev_size,
        "sizes": {name: len(getattr(result, name)) for name in ("train", "dev", "test")},
        "by_dataset": {
            name: {k: int(v) for k, v in getattr(result, name)["dataset"].value_counts().sort_index().items()}
            for name in ("train", "dev", "test")
        },
        "split_overlap": {"train_dev": 0, "train_test": 0, "dev_test": 0},
    }
