"""Exact match is FlashRAG's `ExactMatch` and Search-R1's `em_check` (docs/method.md §7).

REFERENCE_CASES writes down what the two reference functions return, read from their code
(RUC-NLPIR/FlashRAG flashrag/evaluator/metrics.py `ExactMatch.calculate_em` with
flashrag/evaluator/utils.py `normalize_answer`; PeterGriffinJin/Search-R1
verl/utils/reward_score/qa_em.py `em_check`). Both: a str gold becomes a one-element list;
the prediction and each alias go through lower() -> drop string.punctuation (ASCII only) ->
re.sub(r"\\b(a|an|the)\\b", " ") -> " ".join(split()); the score is 1 when some alias equals
the prediction, the empty string included, else 0. No unicode folding.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.errors import InputError
from pipeline.eval.em import exact_match
from pipeline.rl.rewards import answerer_correctness

# (prediction, golden, FlashRAG calculate_em, Search-R1 em_check)
REFERENCE_CASES = [
    ("Paris", ["paris"], 1.0, 1),
    ("The Eiffel Tower!", ["eiffel tower"], 1.0, 1),
    ("Lyon", ["Paris", "City of Light", "lyon"], 1.0, 1),
    ("Lyon", ["Paris"], 0.0, 0),
    ("Paris", [], 0.0, 0),
    ("  the   United\tStates ", ["United States"], 1.0, 1),
    ("an apple", ["apple"], 1.0, 1),
    ("theater", ["ater"], 0.0, 0),  # \b keeps "the" inside a word
    ("U.S.", ["US"], 1.0, 1),
    ("1,000", ["1000"], 1.0, 1),
    ("don't", ["dont"], 1.0, 1),
    # degenerate strings: both sides normalise to ""
    ("", [""], 1.0, 1),
    ("", ["Paris"], 0.0, 0),
    ("Paris", [""], 0.0, 0),
    ("the", ["a"], 1.0, 1),
    ("The The", ["The The"], 1.0, 1),
    ("", ["The The"], 1.0, 1),
    ("A+", ["A+"], 1.0, 1),
    ("A", ["A+"], 1.0, 1),  # "a+" -> "a" -> article -> ""
    ("B+", ["A+"], 0.0, 0),
    ("!!!", ["!!!"], 1.0, 1),
    ("?", ["!!!", "Paris"], 1.0, 1),
    ("Paris", ["!!!", "Paris"], 1.0, 1),
    # a single gold string is one alias, never split
    ("Paris", "Paris", 1.0, 1),
    ("Paris", "Paris, France", 0.0, 0),
    ("paris france", "Paris, France", 1.0, 1),
    ("", "The The", 1.0, 1),
    # no unicode folding; punctuation is ASCII only; str.split() white space
    ("Röntgen", ["Rontgen"], 0.0, 0),
    ("Wilhelm Conrad Röntgen", ["wilhelm conrad röntgen"], 1.0, 1),
    ("São Paulo", ["Sao Paulo"], 0.0, 0),
    ("\u201cParis\u201d", ["Paris"], 0.0, 0),  # curly quotes are not string.punctuation
    ("Paris\u00a0France", ["Paris France"], 1.0, 1),  # NBSP is white space for str.split
    ("Paris\u200bFrance", ["ParisFrance"], 0.0, 0),  # zero-width space is neither
    ("İstanbul", ["istanbul"], 0.0, 0),  # "İ".lower() is "i" + combining dot
]


@pytest.mark.parametrize(("prediction", "golden", "flashrag", "searchr1"), REFERENCE_CASES)
def test_exact_match_is_flashrag_and_search_r1(prediction, golden, flashrag, searchr1):
    assert flashrag == searchr1  # the two references agree on every case written down
    assert exact_match(prediction, golden) is bool(searchr1)


@given(st.text(max_size=30))
def test_every_string_matches_itself_as_in_both_references(text: str) -> None:
    # normalize_answer is deterministic, so both references score a string against itself 1
    assert exact_match(text, [text]) and exact_match(text, text)


def test_no_answer_is_wrong_even_against_an_alias_that_normalises_to_empty():
    # None is a format failure (no <answer>): the references have no such value
    assert not exact_match(None, ["The The"]) and not exact_match(None, "")


def test_numpy_arrays_from_parquet_are_alias_lists():
    assert exact_match("Paris", np.array(["Rome", "paris"], dtype=object))


@pytest.mark.parametrize(("prediction", "golden", "needle"), [
    ("Paris", ["Paris", 3], "expected strings, got int"),
    ("Paris", 3, "expected a string or a list of strings, got int"),
    (3, ["3"], "prediction: expected a string or None, got int"),
])
def test_bad_types_are_input_errors(prediction, golden, needle):
    with pytest.raises(InputError, match=needle):
        exact_match(prediction, golden)


def _answerer(answer, golden, malformed=False):
    return {"role": "answerer", "answer": answer, "golden_answers": golden, "malformed": malformed}


def test_training_reward_uses_the_same_exact_match():
    rows = [(p, g) for p, g, _, _ in REFERENCE_CASES]
    samples = pd.DataFrame([_answerer(p, g) for p, g in rows]
                           + [_answerer(None, ["The The"]), _answerer("The The", ["The The"], malformed=True)])
    correct = answerer_correctness(samples)["correct"].tolist()
    assert correct[: len(rows)] == [float(exact_match(p, g)) for p, g in rows]
    assert correct[len(rows):] == [0.0, 0.0]  # no answer; malformed call
