"""Facts read (pipeline.eval.stated_reads): a hop counts as read only through its stating passage,
misses are classed by the report's closest sentence, and the report shows both tests."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.eval.stated_reads import (
    COLUMNS,
    has_stated,
    hops_by_question,
    index_passages,
    reads_table,
    stated_columns,
)

PASSAGES = pd.DataFrame({
    "id": ["0", "1", "2"],
    "title": ["Tasin Tinus", "Tasin Lelos", "Rino Boto"],
    "text": ["Tasin Tinus (born 5 June 1933) is a architect from Dumil. Tasin Tinus is married to Rino Boto, "
             "a painter.",
             "Tasin Lelos was born in the city of Detel, Soban. Tasin Lelos is married to Nibi Pekur, a poet.",
             "Rino Boto (born 2 May 1940) is a painter from Soban. Rino Boto met Tasin Lelos in Detel."],
})
BORN = {"question": "When was Tasin Tinus born?", "answer": "5 June 1933", "title": "Tasin Tinus"}
SPOUSE = {"question": "Who is Tasin Lelos married to?", "answer": "Nibi Pekur", "title": "Tasin Lelos"}
CITY = {"question": "Where was Tasin Lelos born?", "answer": "Detel", "title": "Tasin Lelos"}


def _record(qid: str, calls: list[tuple[str, str, list[str]]], golden: list[str]) -> dict:
    return {"system": "s", "question_id": qid, "golden_answers": golden, "family": "single-hop", "n_hops": 1,
            "searcher_tasks": [c[0] for c in calls], "searcher_reports": [c[1] for c in calls],
            "searcher_passage_ids": [c[2] for c in calls], "searcher_calls": len(calls),
            "searcher_calls_read": 0, "searcher_calls_kept": 0, "hop_retrieved": [True]}


def _stated(records: list[dict], hops: dict) -> pd.DataFrame:
    return stated_columns(pd.DataFrame(records), hops, index_passages(PASSAGES))


def test_a_call_that_read_the_stating_passage_and_kept_the_answer():
    out = _stated([_record("q", [("when was tasin tinus born", "Tasin Tinus (born 5 June 1933) is a architect.",
                                   ["2", "0"])], ["5 June 1933"])], {"q": [BORN]}).iloc[0]
    assert out["hop_stated"] == [True]
    assert (out["searcher_calls_stated"], out["searcher_calls_stated_kept"]) == (1, 1)
    assert sum(out[f"miss_{m}"] for m in ("copied_wrong", "other_verbatim", "other_copied_wrong", "empty")) == 0


def test_a_coincidental_mention_is_not_a_stating_read():
    """Detel is in Rino Boto's passage too; only Tasin Lelos's passage states where Tasin Lelos was born."""
    out = _stated([_record("q", [("where was tasin lelos born", "Rino Boto met Tasin Lelos in Detel.", ["2"])],
                           ["Detel"])], {"q": [CITY]}).iloc[0]
    assert out["hop_stated"] == [False]
    assert out["searcher_calls_stated"] == 0


def test_a_task_that_names_the_answer_is_no_read():
    out = _stated([_record("q", [("where in detel was tasin lelos born", "", ["1"])], ["Detel"])],
                  {"q": [CITY]}).iloc[0]
    assert out["searcher_calls_stated"] == 0


@pytest.mark.parametrize("report, expected", [
    ("Tasin Tinus (born 5 July 1933) is a architect from Dumil.", "copied_wrong"),
    ("Tasin Tinus is married to Rino Boto, a painter.", "other_verbatim"),
    ("Tasin Tinus is married to Rino Bata, a painter.", "other_copied_wrong"),
    ("", "empty"),
])
def test_misses_are_classed_by_the_reports_closest_sentence(report, expected):
    out = _stated([_record("q", [("when was tasin tinus born", report, ["0", "1"])], ["5 June 1933"])],
                  {"q": [BORN]}).iloc[0]
    assert (out["searcher_calls_stated"], out["searcher_calls_stated_kept"]) == (1, 0)
    assert {m: out[f"miss_{m}"] for m in ("copied_wrong", "other_verbatim", "other_copied_wrong", "empty")} == {
        m: int(m == expected) for m in ("copied_wrong", "other_verbatim", "other_copied_wrong", "empty")}


def test_another_relation_of_the_same_subject_is_a_verbatim_miss():
    """Asked for a spouse, the Searcher reports the birthplace sentence of the stating passage."""
    out = _stated([_record("q", [("who is tasin lelos married to", "Tasin Lelos was born in the city of Detel, "
                                  "Soban.", ["1"])], ["Nibi Pekur"])], {"q": [SPOUSE]}).iloc[0]
    assert out["miss_other_verbatim"] == 1 and out["miss_copied_wrong"] == 0


def test_questions_without_hops_get_no_figures_and_unknown_passages_are_named():
    out = _stated([_record("q", [("t", "r", ["0"])], ["x"])], {"q": None}).iloc[0]
    assert all(out[c] is None or pd.isna(out[c]) for c in COLUMNS)
    with pytest.raises(InputError, match="q2.*passage id '9'"):
        _stated([_record("q2", [("t", "r", ["9"])], ["5 June 1933"])], {"q2": [BORN]})
    with pytest.raises(InputError, match="question 'q3' is not in the split"):
        _stated([_record("q3", [("t", "r", ["0"])], ["x"])], {})


def test_reads_table_pools_calls_and_hops():
    records = [_record("a", [("when was tasin tinus born", "born 5 June 1933", ["0"]),
                             ("when was tasin tinus born", "Tasin Tinus (born 5 July 1933) is a architect from Dumil.",
                              ["0"])], ["5 June 1933"]),
               _record("b", [("where was tasin lelos born", "Rino Boto met Tasin Lelos in Detel.", ["2"])],
                       ["Detel"])]
    records[0]["searcher_calls_read"], records[0]["searcher_calls_kept"] = 2, 1
    records[1]["searcher_calls_read"], records[1]["searcher_calls_kept"] = 1, 1
    frame = _stated(records, {"a": [BORN], "b": [CITY]})
    assert has_stated(frame)
    row = reads_table(frame, ["s"]).set_index("category").loc["single-hop"]
    assert row["calls"] == 3
    assert row["read"] == pytest.approx(100.0) and row["stated"] == pytest.approx(200 / 3)
    assert row["fidelity"] == pytest.approx(200 / 3) and row["fidelity_stated"] == pytest.approx(50.0)
    assert row["copied_wrong"] == pytest.approx(50.0)
    assert row["hops_stated"] == pytest.approx(50.0) and row["hop_count"] == 2


def test_hops_by_question_reads_a_splits_json_column():
    split = pd.DataFrame({"id": ["a", "b"], "hops": ['[{"question": "q", "answer": "x", "title": "T"}]', None]})
    assert hops_by_question(split, "test.parquet") == {"a": [{"question": "q", "answer": "x", "title": "T"}],
                                                        "b": None}
    with pytest.raises(InputError, match="test.parquet, question a: field 'hops'"):
        hops_by_question(pd.DataFrame({"id": ["a"], "hops": ["not json"]}), "test.parquet")
