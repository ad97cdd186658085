"""make_splits: dedup reasons and counts, leakage removal, exact quotas, determinism."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data.dedup import OUTPUT_COLUMNS, make_splits
from pipeline.data.normalize import normalize_question
from pipeline.data.world import WorldConfig, generate_world
from pipeline.domain import DATASETS
from pipeline.errors import InputError
from pipeline.io import write_parquet


def _table(rows: list[tuple[str, str, str, str, object]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["dataset", "split", "id", "question", "golden_answers"])


def _hand_made() -> pd.DataFrame:
    rows = [("nq", "train", f"nq_tr_{i:02d}", f"who is person {i}", [f"p{i}"]) for i in range(30)]
    rows += [
        ("nq", "train", "nq_tr_90", "Who is Person 3?", ["p3"]),          # duplicate_in_split (variant)
        ("nq", "train", "nq_tr_91", "who is person 4", ["p4"]),           # duplicate_in_split (exact)
        ("nq", "train", "nq_tr_92", "   ", ["x"]),                        # empty question
        ("nq", "train", "nq_tr_93", "who is nobody", []),                 # empty answers
        ("hotpotqa", "train", "hp_tr_00", "who is  person 5 ?", ["p5"]),  # duplicate_across_train_datasets
    ]
    rows += [("hotpotqa", "train", f"hp_tr_{i:02d}", f"where is town {i}", [f"t{i}"]) for i in range(1, 20)]
    rows += [("nq", "test", f"nq_te_{i:02d}", f"when was thing {i} made", ["1900"]) for i in range(10)]
    rows += [
        ("nq", "test", "nq_te_50", "WHO IS PERSON 7", ["p7"]),            # test_equals_train
        ("nq", "test", "nq_te_51", "when was thing 2 made?", ["1900"]),    # duplicate_in_split
        ("musique", "dev", "mu_dv_00", "Where is Town 1?", ["t1"]),       # test_equals_train (dev used as test)
        ("nq", "dev", "nq_dv_00", "unused dev row", ["u"]),               # unused: nq has test rows
    ]
    rows += [("musique", "dev", f"mu_dv_{i:02d}", f"what is the name of river {i}", [np.array(["r", f"r{i}"])])
             for i in range(1, 8)]
    rows = [(d, s, i, q, a[0] if isinstance(a, list) and a and isinstance(a[0], np.ndarray) else a)
            for d, s, i, q, a in rows]
    return _table(rows)


def _split(df: pd.DataFrame, **kw):
    args = dict(train_datasets=["nq", "hotpotqa"], test_quotas={"nq": 5, "musique": 4}, dev_size=6, seed=11)
    args.update(kw)
    return make_splits(df, **args)


def test_counts_by_reason_and_dataset():
    r = _split(_hand_made())
    assert r.report["removed"] == {"empty": 2, "duplicate_in_split": 3, "duplicate_across_train_datasets": 1,
                                   "test_equals_train": 2}
    assert r.report["removed_by_dataset"]["nq"] == {"empty": 2, "duplicate_in_split": 3, "test_equals_train": 1}
    assert r.report["removed_by_dataset"]["musique"] == {"test_equals_train": 1}
    assert r.report["removed_by_dataset"]["hotpotqa"] == {"duplicate_across_train_datasets": 1}
    assert r.report["unused_rows"] == {"nq/dev": 1}
    assert r.report["test_sources"] == {"musique": "dev", "nq": "test"}
    assert r.report["pool_sizes_after_dedup"] == {"train": {"hotpotqa": 19, "nq": 30}, "test": {"musique": 7, "nq": 10}}
    assert r.report["sizes"] == {"train": 43, "dev": 6, "test": 9}
    assert r.report["by_dataset"]["test"] == {"musique": 4, "nq": 5}


def test_first_id_is_kept_and_frames_follow_the_contract():
    r = _split(_hand_made())
    every = pd.concat([r.train, r.dev])
    assert "nq_tr_03" in set(every["id"]) and "nq_tr_90" not in set(every["id"])
    assert "hp_tr_00" not in set(every["id"]) and "nq_tr_05" in set(every["id"])  # nq is listed first
    for frame, name in ((r.train, "train"), (r.dev, "dev"), (r.test, "test")):
        assert list(frame.columns) == OUTPUT_COLUMNS
        assert (frame["split"] == name).all()
        assert frame.equals(frame.sort_values(["dataset", "id"]).reset_index(drop=True))
        assert (frame["norm_question"] == frame["question"].map(normalize_question)).all()
        assert frame["golden_answers"].map(lambda a: type(a) is list and all(type(x) is str for x in a)).all()
    assert r.test.loc[r.test["dataset"] == "musique", "golden_answers"].map(len).eq(2).all()


def test_no_normalised_question_in_two_splits_and_no_leak():
    r = _split(_hand_made())
    sets = [set(f["norm_question"]) for f in (r.train, r.dev, r.test)]
    assert not (sets[0] & sets[1]) and not (sets[0] & sets[2]) and not (sets[1] & sets[2])
    assert "who is person 7" not in sets[2] and "where is town 1" not in sets[2]
    assert not set(r.dev["id"]) & set(r.train["id"])


def test_pool_too_small_names_the_dataset():
    with pytest.raises(InputError, match=r"test pool of dataset 'musique' \(dev split\) has 7 questions.*asks for 8"):
        _split(_hand_made(), test_quotas={"nq": 5, "musique": 8})
    with pytest.raises(InputError, match="dev_size 49"):
        _split(_hand_made(), dev_size=49)
    with pytest.raises(InputError, match="'bamboogle' has no rows"):
        _split(_hand_made(), test_quotas={"bamboogle": 1})


def test_input_table_errors():
    df = _hand_made()
    with pytest.raises(InputError, match="missing column"):
        make_splits(df.drop(columns=["golden_answers"]), train_datasets=["nq"], test_quotas={}, dev_size=1, seed=0)
    dup = pd.concat([df, df.iloc[[0]]])
    with pytest.raises(InputError, match="id 'nq_tr_00'.*more than once"):
        make_splits(dup, train_datasets=["nq"], test_quotas={}, dev_size=1, seed=0)
    with pytest.raises(InputError, match="training dataset 'squad'"):
        make_splits(df, train_datasets=["squad"], test_quotas={}, dev_size=1, seed=0)


def test_same_seed_byte_identical_parquet_other_seed_differs(tmp_path):
    df = _hand_made()
    first, second, other = _split(df), _split(df.sample(frac=1, random_state=3)), _split(df, seed=12)
    for name in ("train", "dev", "test"):
        write_parquet(tmp_path / f"a_{name}.parquet", getattr(first, name))
        write_parquet(tmp_path / f"b_{name}.parquet", getattr(second, name))
        assert (tmp_path / f"a_{name}.parquet").read_bytes() == (tmp_path / f"b_{name}.parquet").read_bytes()
    assert first.report == second.report
    assert set(first.test["id"]) != set(other.test["id"]) or set(first.dev["id"]) != set(other.dev["id"])


def test_one_quota_does_not_shift_another_datasets_draw():
    a = _split(_hand_made(), test_quotas={"nq": 5, "musique": 4})
    b = _split(_hand_made(), test_quotas={"nq": 5, "musique": 6})
    assert a.test.loc[a.test["dataset"] == "nq", "id"].tolist() == b.test.loc[b.test["dataset"] == "nq", "id"].tolist()


def test_world_splits_remove_all_planted_leaks():
    world = generate_world(WorldConfig(
        seed=3, n_people=150, n_films=60, n_books=60, n_companies=40, n_cities=20, n_countries=5,
        train_questions={"nq": 300, "hotpotqa": 300}, test_questions={d: 60 for d in DATASETS},
        near_duplicate_rate=0.05, exact_duplicate_rate=0.02))
    q = world.questions
    r = make_splits(q, train_datasets=["nq", "hotpotqa"], test_quotas={d: 40 for d in DATASETS}, dev_size=50, seed=1)
    planted = q["planted"].value_counts().to_dict()
    # every planted exact copy and in-split near copy is one duplicate removed (or a leak caught first)
    assert r.report["removed"]["duplicate_in_split"] >= planted["exact_in_split"] + planted["near_in_split"] - 5
    assert r.report["removed"]["test_equals_train"] >= planted["near_train"] * 0.8
    train_norms = set(pd.concat([r.train, r.dev])["norm_question"])
    assert not set(r.test["norm_question"]) & train_norms
    assert set(r.test.columns) == set(OUTPUT_COLUMNS) | {"family", "hops"}
    assert r.report["sizes"]["test"] == 7 * 40


@settings(max_examples=25, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(["nq", "hotpotqa", "popqa"]), st.sampled_from(["train", "test"]),
                          st.sampled_from(["a b", "A b?", "c d", "e", "e f", "", "g h", "Ab", "x y z"])),
                min_size=1, max_size=40), st.integers(0, 1000))
def test_invariants_on_random_tables(rows, seed):
    rows = [("nq", "train", "q0", "anchor", ["x"])] + [
        (d, s, f"id{k:03d}", q, ["ans"]) for k, (d, s, q) in enumerate(rows)]
    df = _table(rows)
    test_sets = {d for d, s, *_ in rows if s == "test"}
    try:
        r = make_splits(df, train_datasets=["nq"], test_quotas={d: 1 for d in test_sets}, dev_size=0, seed=seed)
    except InputError as e:
        assert "test pool of dataset" in str(e)
        return
    norms = [set(f["norm_question"]) for f in (r.train, r.dev, r.test)]
    assert not (norms[0] & norms[2])
    assert r.train["norm_question"].is_unique
    assert len(r.test) == len(test_sets)
    assert sum(r.report["removed"].values()) + sum(r.report["sizes"].values()) + sum(
        r.report["unused_rows"].values()) + (sum(r.report["pool_sizes_after_dedup"]["test"].values())
                                             - len(r.test)) == len(df)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.text(), st.text(alphabet="aAnNtThHeE .,?!'-\\\"\t\n"), st.none(), st.integers()),
                max_size=8))
def test_fast_normalisation_equals_normalize_question(texts):
    from pipeline.data.dedup import normalize_questions

    assert normalize_questions(texts) == [normalize_question(t) if isinstance(t, str) else "" for t in texts]
