"""The synthetic world: deterministic, short names, answerable hops, planted near-duplicates."""

from __future__ import annotations

import json
import re

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data.normalize import normalize_answer, normalize_question
from pipeline.data.world import QUESTION_COLUMNS, WorldConfig, generate_world
from pipeline.data.world_duplicates import near_variant
from pipeline.domain import DATASETS
from pipeline.errors import InputError

SMALL = dict(
    n_countries=5, n_cities=20, n_people=150, n_films=60, n_books=60, n_companies=40,
    train_questions={"nq": 300, "hotpotqa": 300},
    test_questions={d: 80 for d in DATASETS},
)


@pytest.fixture(scope="module")
def world():
    return generate_world(WorldConfig(seed=7, **SMALL))


def test_same_seed_same_world_and_other_seed_differs(world):
    again = generate_world(WorldConfig(seed=7, **SMALL))
    pd.testing.assert_frame_equal(world.passages, again.passages)
    pd.testing.assert_frame_equal(world.questions, again.questions)
    other = generate_world(WorldConfig(seed=8, **SMALL))
    assert not world.questions["question"].equals(other.questions["question"])
    assert not world.passages["contents"].equals(other.passages["contents"])


def test_passages_are_short_wikipedia_like_rows(world):
    p = world.passages
    assert list(p.columns) == ["id", "title", "text", "contents"]
    assert p["id"].is_unique and p["id"].map(lambda x: isinstance(x, str)).all()
    assert (p["contents"] == '"' + p["title"] + '"\n' + p["text"]).all()
    words = p["text"].str.split().str.len()
    assert words.between(25, 70).all(), words.describe()
    # every entity has a passage: people, films, books, cities, countries, companies
    assert p["title"].nunique() == 150 + 60 + 60 + 20 + 5 + 40


def test_names_are_short_and_frequent(world):
    people = world.kb.people.name
    assert all(re.fullmatch(r"[A-Z][a-z]{3,4} [A-Z][a-z]{3,4}", n) for n in people)
    given = pd.Series([n.split()[0] for n in people])
    assert given.value_counts().mean() >= 3  # name pieces recur, so a tiny model sees each often
    assert all(re.fullmatch(r"[A-Z][a-z]{3,4}", c) for c in world.kb.cities.name)


def test_question_table_shape_and_pools(world):
    q = world.questions
    assert list(q.columns) == QUESTION_COLUMNS
    assert q["id"].is_unique
    sizes = q.groupby(["dataset", "split"]).size().to_dict()
    assert sizes == {**{(d, "test"): 80 for d in DATASETS}, ("nq", "train"): 300, ("hotpotqa", "train"): 300}
    for answers in q["golden_answers"]:
        assert isinstance(answers, list) and answers and all(isinstance(a, str) and a for a in answers)
    fam = q.groupby("dataset")["family"].agg(set).to_dict()
    assert fam["nq"] == fam["triviaqa"] == fam["popqa"] == {"single-hop"}
    assert {"bridge", "comparison"} <= fam["hotpotqa"]
    assert {"composition", "comparison"} <= fam["2wiki"]
    hop_counts = q[(q["dataset"] == "musique") & (q["planted"] == "")]["hops"].map(lambda h: len(json.loads(h)))
    assert set(hop_counts) == {2, 3}
    nq = q[(q["dataset"] == "nq") & (q["planted"] == "")]["question"]
    assert (nq == nq.str.lower()).all() and not nq.str.endswith("?").any()


def test_every_hop_is_answerable_from_its_passage(world):
    text_by_title = world.passages.groupby("title")["text"].agg(" ".join).to_dict()
    for row in world.questions.itertuples():
        hops = json.loads(row.hops)
        assert hops, row.question
        for hop in hops:
            assert set(hop) == {"question", "answer", "title"}
            assert hop["answer"] in text_by_title[hop["title"]], (row.question, hop)
        if row.family == "comparison":
            answer = row.golden_answers[0]
            assert answer in {"yes", "no"} or normalize_answer(answer) in normalize_question(row.question)
        else:
            assert normalize_answer(hops[-1]["answer"]) in {normalize_answer(a) for a in row.golden_answers}


def test_dates_and_countries_have_aliases(world):
    q = world.questions
    dated = q[q["question"].str.contains("born") & q["family"].eq("single-hop")]
    dated = dated[dated["golden_answers"].map(len) == 3]
    assert len(dated) > 0
    a = dated["golden_answers"].iloc[0]
    assert re.fullmatch(r"\d+ [A-Z][a-z]+ \d{4}", a[0]) and re.fullmatch(r"[A-Z][a-z]+ \d+, \d{4}", a[1])
    formal = [n for n in world.kb.countries.formal if n.startswith("United ")]
    if formal:
        i = world.kb.countries.formal.index(formal[0])
        assert world.kb.country_aliases(i)[-1] == f"U.{world.kb.countries.name[i][0]}."


def test_planted_duplicates_share_a_normalised_question(world):
    q = world.questions.assign(norm=world.questions["question"].map(normalize_question))
    train_norms = set(q.loc[q["split"] == "train", "norm"])
    planted = q[q["planted"] != ""]
    assert set(planted["planted"]) == {"near_train", "near_in_split", "exact_in_split"}
    assert planted.loc[planted["planted"] == "near_train", "norm"].isin(train_norms).all()
    for row in planted.itertuples():
        same = q[(q["norm"] == row.norm) & (q["id"] != row.id) & (q["split"].isin([row.split, "train"]))]
        assert len(same) >= 1, row.question
        if row.planted != "exact_in_split":
            assert not same["question"].eq(row.question).all()
    # apart from planted rows, no two questions of the world normalise alike
    assert q.loc[q["planted"] == "", "norm"].is_unique


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="abcdeiou ?'ABCKT,", min_size=3, max_size=40), st.integers(0, 2**32 - 1))
def test_near_variant_differs_but_normalises_alike(text, seed):
    v = near_variant(text, np.random.default_rng(seed))
    assert v != text
    assert normalize_question(v) == normalize_question(text)


def test_config_errors_are_input_errors():
    with pytest.raises(InputError, match="unknown key"):
        WorldConfig.from_dict({"n_peple": 3})
    with pytest.raises(InputError, match="unknown dataset"):
        WorldConfig.from_dict({"test_questions": {"squad": 3}})
    tiny = dict(SMALL, n_people=10, n_films=2, n_books=2, n_companies=2, n_cities=3, n_countries=2,
                train_questions={"nq": 5000}, test_questions={})
    with pytest.raises(InputError, match="cannot make 5000 distinct nq"):
        generate_world(WorldConfig(**tiny))
    assert WorldConfig.from_dict({"seed": 3, "n_people": 50}).n_people == 50
