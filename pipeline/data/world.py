"""The synthetic knowledge world of the tiny and ci profiles.

`generate_world(WorldConfig(...))` draws entities (people, films, books, cities,
countries, companies) with short two-syllable names, writes a passage corpus that
states every relation, and draws question pools for the seven datasets:
"train" pools for the configured training datasets (nq, hotpotqa by default) and
"test" pools for all seven, with planted near-duplicates for dedup to remove.
Same config (seed included) -> identical world.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from pipeline.data.world_duplicates import plant_duplicates
from pipeline.data.world_entities import KnowledgeBase, build_kb
from pipeline.data.world_passages import build_passages
from pipeline.data.world_questions import QuestionMaker, hops_json, make_pool
from pipeline.domain import DATASETS
from pipeline.errors import InputError

QUESTION_COLUMNS = ["dataset", "split", "id", "question", "golden_answers", "family", "hops", "planted"]


def _default_train() -> dict[str, int]:
    return {"nq": 1500, "hotpotqa": 1500}


def _default_test() -> dict[str, int]:
    return {"nq": 300, "triviaqa": 300, "popqa": 300, "hotpotqa": 300, "2wiki": 300, "musique": 300,
            "bamboogle": 150}


@dataclass
class WorldConfig:
    """Size knobs of the world. Pools: questions per dataset in the train and test pools."""

    seed: int = 0
    n_countries: int = 8
    n_cities: int = 40
    n_people: int = 400
    n_films: int = 150
    n_books: int = 150
    n_companies: int = 80
    married_fraction: float = 0.6
    train_questions: dict[str, int] = field(default_factory=_default_train)
    test_questions: dict[str, int] = field(default_factory=_default_test)
    near_duplicate_rate: float = 0.02  # share of each pool replaced by near-copies of train questions
    exact_duplicate_rate: float = 0.005  # share of each pool replaced by exact copies inside the pool

    @classmethod
    def from_dict(cls, values: Mapping[str, Any] | None, where: str = "world config") -> WorldConfig:
        """Build from a params.yaml mapping; unknown keys raise InputError."""
        values = dict(values or {})
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise InputError(f"{where}: unknown key(s) {unknown}; expected some of {sorted(known)}")
        cfg = cls(**values)
        cfg.validate(where)
        return cfg

    def validate(self, where: str = "world config") -> None:
        for pools, label in ((self.train_questions, "train_questions"), (self.test_questions, "test_questions")):
            for dataset, n in pools.items():
                if dataset not in DATASETS:
                    raise InputError(f"{where}: {label} names unknown dataset {dataset!r}; expected one of {DATASETS}")
                if not isinstance(n, int) or n < 0:
                    raise InputError(f"{where}: {label}.{dataset} must be a non-negative integer, got {n!r}")
        for name in ("married_fraction", "near_duplicate_rate", "exact_duplicate_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise InputError(f"{where}: {name} must be in [0, 1], got {getattr(self, name)!r}")


@dataclass
class World:
    config: WorldConfig
    kb: KnowledgeBase
    passages: pd.DataFrame  # id, title, text, contents
    questions: pd.DataFrame  # QUESTION_COLUMNS; hops is a JSON string


def generate_world(cfg: WorldConfig) -> World:
    """Draw the whole world from cfg.seed."""
    cfg.validate()
    seeds = np.random.SeedSequence(cfg.seed).spawn(3)
    kb = build_kb(
        np.random.default_rng(seeds[0]),
        n_countries=cfg.n_countries, n_cities=cfg.n_cities, n_people=cfg.n_people,
        n_films=cfg.n_films, n_books=cfg.n_books, n_companies=cfg.n_companies,
        married_fraction=cfg.married_fraction,
    )
    passages = build_passages(kb)
    maker = QuestionMaker(kb, np.random.default_rng(seeds[1]))
    seen: set[str] = set()
    pools: dict[tuple[str, str], list[dict]] = {}
    for split, sizes in (("train", cfg.train_questions), ("test", cfg.test_questions)):
        for dataset in DATASETS:
            if sizes.get(dataset, 0) <= 0:
                continue
            pools[(dataset, split)] = [
                {"dataset": dataset, "split": split, "question": q.question, "golden_answers": q.golden_answers,
                 "family": q.family, "hops": hops_json(q), "planted": ""}
                for q in make_pool(maker, dataset, sizes[dataset], seen, split)
            ]
    plant_duplicates(pools, near_rate=cfg.near_duplicate_rate, exact_rate=cfg.exact_duplicate_rate,
                     rng=np.random.default_rng(seeds[2]))
    rows = []
    for (dataset, split), pool in pools.items():
        for k, row in enumerate(pool):
            rows.append({**row, "id": f"{dataset}_{split}_{k:06d}"})
    questions = pd.DataFrame(rows, columns=QUESTION_COLUMNS)
    return World(cfg, kb, passages, questions)
