"""Planting near-duplicates into question pools, so dedup has real work to do.

A near-duplicate differs from its source only in case, punctuation, spacing or an
accent: its normalised text (normalize_question) is the source's.
"""

from __future__ import annotations

import numpy as np

from pipeline.data.normalize import normalize_question

_ACCENTS = {"a": "á", "e": "é", "o": "ö", "u": "ü", "i": "í"}


def _toggle_case(q: str, rng: np.random.Generator) -> str:
    forms = (q.lower(), q.upper(), q[:1].swapcase() + q[1:], q.title())
    return forms[int(rng.integers(len(forms)))]


def _toggle_question_mark(q: str, rng: np.random.Generator) -> str:
    if q.endswith("?"):
        return q[:-1] if rng.random() < 0.5 else q[:-1] + " ?"
    return q + "?"


def _spacing(q: str, rng: np.random.Generator) -> str:
    words = q.split(" ")
    if len(words) > 1 and rng.random() < 0.7:
        k = int(rng.integers(1, len(words)))
        return " ".join(words[:k]) + "  " + " ".join(words[k:])
    return f" {q}  "


def _accent(q: str, rng: np.random.Generator) -> str:
    spots = [i for i, ch in enumerate(q) if ch in _ACCENTS]
    if not spots:
        return q + " "
    i = spots[int(rng.integers(len(spots)))]
    return q[:i] + _ACCENTS[q[i]] + q[i + 1:]


def _is_single(row: dict) -> bool:
    return row["family"] == "single-hop"


_CHANGES = (_toggle_case, _toggle_question_mark, _spacing, _accent)


def near_variant(q: str, rng: np.random.Generator) -> str:
    """A different string with the same normalised text (one or two surface changes)."""
    key = normalize_question(q)
    for _ in range(10):
        out = q
        for k in rng.choice(len(_CHANGES), size=int(rng.integers(1, 3)), replace=False).tolist():
            out = _CHANGES[k](out, rng)
        if out != q and normalize_question(out) == key:
            return out
    return f"  {q}"


def plant_duplicates(
    pools: dict[tuple[str, str], list[dict]],
    *,
    near_rate: float,
    exact_rate: float,
    rng: np.random.Generator,
) -> None:
    """Overwrite some rows of every pool, in place, with copies of other questions.

    Train pools get near-duplicates of their own rows ("near_in_split"); other pools
    get near-duplicates of training questions ("near_train": of their own dataset's
    train pool when there is one, else of training questions that are single-hop or
    multi-hop like the pool's own). Every pool also gets a few
    exact copies of its own rows ("exact_in_split"). A planted row keeps its pool's
    dataset and split and takes the source's answers, family and hops.
    """
    train_rows = {d: rows for (d, s), rows in pools.items() if s == "train"}
    all_train = [r for rows in train_rows.values() for r in rows]
    by_kind = {kind: [r for r in all_train if _is_single(r) == kind] for kind in (True, False)}
    for (dataset, split), rows in pools.items():
        n = len(rows)
        n_near, n_exact = round(near_rate * n), round(exact_rate * n)
        if n < 2 or n_near + n_exact == 0:
            continue
        n_near = min(n_near, n // 3)
        n_exact = min(n_exact, n // 3)
        targets = rng.choice(n, size=n_near + n_exact, replace=False).tolist()
        untouched = sorted(set(range(n)) - set(targets))
        # Copy the sources first: a source must not be overwritten before it is copied.
        originals = [dict(r) for r in rows]
        for k, t in enumerate(targets):
            exact = k >= n_near
            if exact or split == "train":
                source, how = originals[untouched[int(rng.integers(len(untouched)))]], (
                    "exact_in_split" if exact else "near_in_split")
            else:
                pool = train_rows.get(dataset) or by_kind[_is_single(originals[0])] or all_train
                if not pool:
                    continue
                source, how = pool[int(rng.integers(len(pool)))], "near_train"
            text = source["question"] if exact else near_variant(source["question"], rng)
            rows[t] = {**source, "dataset": dataset, "split": split, "question": text, "planted": how}
