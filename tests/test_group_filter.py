"""Dynamic sampling's group filter (pipeline.rl.group_filter) on hand-made tables."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.rl.group_filter import filter_batch, informative_questions


def tables(outcomes: dict[str, list[float]]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Samples (a Searcher and an Answerer sample per trajectory) with the team outcome `r_em`
    of each trajectory of each question, and two tokens per sample."""
    rows = []
    for q, per_trajectory in outcomes.items():
        for t, r_em in enumerate(per_trajectory):
            for role in ("searcher", "answerer"):
                rows.append({"sample_id": f"{q}-{t}-{role}", "question_id": q, "trajectory_id": f"{q}-{t}",
                             "role": role, "r_em": r_em})
    samples = pd.DataFrame(rows)
    tokens = pd.DataFrame({"sample_id": [s for s in samples["sample_id"] for _ in range(2)]})
    return samples, tokens


def test_informative_questions_are_those_whose_outcomes_differ_in_draw_order():
    samples, _ = tables({"q3": [1, 0, 0], "q1": [0, 0, 0], "q0": [1, 1, 1], "q2": [0, 0, 1]})
    assert informative_questions(samples) == ["q3", "q2"]


def test_filter_keeps_every_sample_and_token_of_the_first_informative_questions():
    samples, tokens = tables({"a": [0, 0], "b": [1, 0], "c": [0, 1], "d": [1, 1], "e": [0, 1]})
    kept, kept_tokens, informative = filter_batch(samples, tokens, questions_per_batch=2)
    assert informative == 3
    assert list(dict.fromkeys(kept["question_id"])) == ["b", "c"]
    assert len(kept) == 8 and set(kept_tokens["sample_id"]) == set(kept["sample_id"]) and len(kept_tokens) == 16


def test_fewer_informative_questions_than_wanted_trains_on_fewer():
    samples, tokens = tables({"a": [0, 0], "b": [1, 0], "c": [1, 1]})
    kept, _, informative = filter_batch(samples, tokens, questions_per_batch=2)
    assert informative == 1 and set(kept["question_id"]) == {"b"}


def test_no_informative_question_falls_back_to_the_first_drawn():
    samples, tokens = tables({"a": [0, 0], "b": [1, 1], "c": [0, 0]})
    kept, kept_tokens, informative = filter_batch(samples, tokens, questions_per_batch=2)
    assert informative == 0 and list(dict.fromkeys(kept["question_id"])) == ["a", "b"]
    assert set(kept_tokens["sample_id"]) == set(kept["sample_id"])


def test_a_table_without_the_outcome_is_refused():
    samples, _ = tables({"a": [0, 1]})
    with pytest.raises(InputError, match="samples: missing column.*r_em"):
        informative_questions(samples.drop(columns="r_em"))


def test_with_the_searchers_own_outcome_a_question_is_informative_when_either_outcome_differs():
    samples, _ = tables({"a": [1, 1], "b": [0, 0], "c": [1, 0], "d": [0, 0]})
    held = {"a-0": 1.0, "a-1": 1.0, "b-0": 1.0, "b-1": 0.0, "c-0": 1.0, "c-1": 1.0, "d-0": 0.0, "d-1": 0.0}
    samples["report_held"] = [held[t] if r == "searcher" else float("nan")
                              for t, r in zip(samples["trajectory_id"], samples["role"])]
    assert informative_questions(samples) == ["b", "c"]
    assert informative_questions(samples.assign(report_held=float("nan"))) == ["c"]  # the team outcome alone
