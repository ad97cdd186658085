"""Held-out questions of all seven datasets, for dev studies of what the test measures.

The dev split is drawn from the training pools, so it holds the training datasets only (NQ and
HotpotQA), while five of the test's seven datasets are never trained on. `held_out_questions`
asks the synthetic world of a profile for new questions in the test's
composition, from a generator stream the world itself never uses, keeping only questions whose
normalised text differs from every train and test pool question (planted duplicates included):
none is a training, dev or test question, so choosing a setting on them is not choosing on test.
They do share the world's facts with the test, as the training questions do.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from pipeline.data.normalize import normalize_question
from pipeline.data.world import World
from pipeline.data.world_questions import QuestionMaker, hops_json, make_pool
from pipeline.domain import DATASETS
from pipeline.errors import InputError

SPLIT = "heldout"
STREAM = 3  # generate_world spawns streams 0-2 of the world seed
COLUMNS = ["dataset", "split", "id", "question", "golden_answers", "norm_question", "family", "hops"]


def composition(quotas: Mapping[str, int], total: int) -> dict[str, int]:
    """`total` questions split over the datasets in the proportions of `quotas` (largest remainder)."""
    if total <= 0:
        raise InputError(f"held-out questions: total must be positive, got {total}")
    whole = sum(quotas.values())
    if whole <= 0:
        raise InputError(f"held-out questions: the quotas {dict(quotas)} hold no questions")
    exact = {d: total * n / whole for d, n in quotas.items()}
    sizes = {d: int(x) for d, x in exact.items()}
    by_remainder = sorted(quotas, key=lambda d: (-(exact[d] - sizes[d]), DATASETS.index(d)))
    for d in by_remainder[: total - sum(sizes.values())]:
        sizes[d] += 1
    return {d: sizes[d] for d in DATASETS if sizes.get(d, 0) > 0}


def held_out_questions(world: World, sizes: Mapping[str, int]) -> pd.DataFrame:
    """`sizes[dataset]` new questions per dataset from `world`, in the splits' columns."""
    seen = {normalize_question(q) for q in world.questions["question"]}
    stream = np.random.SeedSequence(world.config.seed).spawn(STREAM + 1)[STREAM]
    maker = QuestionMaker(world.kb, np.random.default_rng(stream))
    rows = []
    for dataset in DATASETS:
        for k, q in enumerate(make_pool(maker, dataset, sizes.get(dataset, 0), seen, SPLIT)):
            rows.append({"dataset": dataset, "split": SPLIT, "id": f"{dataset}_{SPLIT}_{k:06d}",
                         "question": q.question, "golden_answers": list(q.golden_answers),
                         "norm_question": normalize_question(q.question), "family": q.family, "hops": hops_json(q)})
    return pd.DataFrame(rows, columns=COLUMNS)
