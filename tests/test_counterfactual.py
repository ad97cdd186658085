"""Counterfactual reading texts and Searcher demonstrations (pipeline.basemodel.counterfactual)."""

from __future__ import annotations

import random

from pipeline.basemodel.counterfactual import (
    AnswerPool,
    counterfactual_reading,
    counterfactual_searchers,
    relation_of,
    replace_words,
)
from pipeline.basemodel.demos_agents import Demo, Episode, Hop, Turn

BORN_A = Hop("When was Rino Boto born?", "5 June 1933", "Rino Boto")
BORN_B = Hop("When was Bo Lelos born?", "2 May 1940", "Bo Lelos")
CITY = Hop("Where was Rino Boto born?", "Detel", "Rino Boto")
EPISODES = [Episode("q1", "When was Rino Boto born?", "single-hop", [BORN_A], ["5 June 1933"]),
            Episode("q2", "When was Bo Lelos born?", "single-hop", [BORN_B], ["2 May 1940"]),
            Episode("q3", "Where was Rino Boto born?", "single-hop", [CITY], ["Detel"])]


def test_relations_pool_answers_of_the_same_question_shape():
    assert relation_of(BORN_A) == relation_of(BORN_B) == "when was born?"
    pool = AnswerPool(EPISODES)
    assert pool.swap("5 June 1933", random.Random(0)) == "2 May 1940"
    assert pool.swap("Detel", random.Random(0)) is None  # the only birthplace: nothing to swap with


def test_whole_words_only():
    assert replace_words("Bo Lelos met Boto in Bo.", "Bo", "Ka") == "Ka Lelos met Boto in Ka."


def test_a_reading_twin_replaces_the_answer_after_the_question_everywhere():
    text = ("Question: when was rino boto born\nDoc 1(Title: \"Rino Boto\") Rino Boto (born 5 June 1933) is a poet. "
            "In 5 June 1933 ...\nEvidence: Rino Boto (born 5 June 1933) is a poet.\nAnswer: 5 June 1933")
    twin = counterfactual_reading(text, BORN_A, AnswerPool(EPISODES), random.Random(0))
    assert twin is not None and "5 June 1933" not in twin
    assert twin.count("2 May 1940") == 4 and twin.endswith("Answer: 2 May 1940")
    assert twin.splitlines()[0] == text.splitlines()[0]
    assert counterfactual_reading(text, CITY, AnswerPool(EPISODES), random.Random(0)) is None


def _searcher(qid: str, prompt: str, observation: str, report: str) -> Demo:
    return Demo("searcher", prompt, (Turn("<search>when was rino boto born</search>", observation),
                                     Turn(f"<report>{report}</report>")), qid, "cascade")


def test_searcher_demos_are_rewritten_in_observations_and_report_not_in_the_prompt():
    demo = _searcher("q1", "Task: when was rino boto born", "Doc 1 Rino Boto (born 5 June 1933) is a poet.",
                     "Rino Boto (born 5 June 1933) is a poet.")
    answerer = Demo("answerer", "Reports: Rino Boto (born 5 June 1933)", (Turn("5 June 1933"),), "q1", "cascade")
    out, rewritten = counterfactual_searchers([demo, answerer], EPISODES, 1.0, seed=3)
    assert rewritten == 1 and out[1] is answerer
    assert out[0].prompt == demo.prompt
    assert "2 May 1940" in out[0].turns[0].observation and "2 May 1940" in out[0].turns[1].completion
    assert "5 June 1933" not in out[0].turns[0].observation + out[0].turns[1].completion
    assert counterfactual_searchers([demo], EPISODES, 0.0, seed=3) == ([demo], 0)
    # an answer the prompt names (a bridge passed on) is left alone
    named = _searcher("q1", "Task: who was born on 5 June 1933", "Doc 1 ... 5 June 1933", "born 5 June 1933")
    assert counterfactual_searchers([named], EPISODES, 1.0, seed=3)[1] == 0


def test_the_share_is_drawn_per_demo_and_reproducibly():
    demos = [_searcher("q1", f"Task {i}", "Rino Boto (born 5 June 1933).", "born 5 June 1933") for i in range(200)]
    first, n = counterfactual_searchers(demos, EPISODES, 0.5, seed=7)
    again, m = counterfactual_searchers(demos, EPISODES, 0.5, seed=7)
    assert first == again and n == m and 70 < n < 130
