"""Held-out questions of the test's composition: new to every world pool, deterministic, answerable."""

from __future__ import annotations

import json

import pytest

from pipeline.data.heldout import COLUMNS, composition, held_out_questions
from pipeline.data.normalize import normalize_question
from pipeline.data.world import WorldConfig, generate_world
from pipeline.domain import DATASETS
from pipeline.errors import InputError

SMALL = dict(
    n_countries=5, n_cities=20, n_people=150, n_films=60, n_books=60, n_companies=40,
    train_questions={"nq": 300, "hotpotqa": 300},
    test_questions={d: 80 for d in DATASETS},
)
PAPER = {"nq": 812, "triviaqa": 812, "popqa": 812, "hotpotqa": 813, "2wiki": 813, "musique": 813, "bamboogle": 125}


def test_composition_keeps_the_quotas_proportions_and_the_total():
    assert composition(PAPER, 1000) == {"nq": 162, "triviaqa": 162, "popqa": 162, "hotpotqa": 163, "2wiki": 163,
                                        "musique": 163, "bamboogle": 25}
    assert composition(PAPER, 5000) == PAPER
    for total in (7, 100, 2001):
        sizes = composition(PAPER, total)
        assert sum(sizes.values()) == total
        assert all(abs(sizes[d] - total * PAPER[d] / 5000) < 1 for d in sizes)
    with pytest.raises(InputError, match="total must be positive"):
        composition(PAPER, 0)


def test_held_out_questions_are_new_to_every_pool_and_the_same_each_time():
    world = generate_world(WorldConfig(seed=7, **SMALL))
    sizes = composition(PAPER, 140)
    heldout = held_out_questions(world, sizes)
    assert list(heldout.columns) == COLUMNS
    assert heldout.groupby("dataset").size().to_dict() == sizes
    assert set(heldout["split"]) == {"heldout"} and heldout["id"].is_unique
    assert heldout["norm_question"].tolist() == [normalize_question(q) for q in heldout["question"]]
    assert heldout["norm_question"].is_unique
    pools = {normalize_question(q) for q in world.questions["question"]}
    assert not pools & set(heldout["norm_question"])
    assert all(json.loads(h) for h in heldout["hops"])
    assert heldout.equals(held_out_questions(generate_world(WorldConfig(seed=7, **SMALL)), sizes))
    other = held_out_questions(generate_world(WorldConfig(seed=8, **SMALL)), sizes)
    assert not heldout["question"].equals(other["question"])
