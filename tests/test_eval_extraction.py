"""Strict and flexible answer extraction, and normalised exact match."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.eval.extraction import flexible_answer, strict_answer


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Paris</answer>", "Paris"),
        ("<think>maybe Rome</think><answer>Paris</answer>", "Paris"),
        ("<answer>Rome</answer> then <answer>Paris</answer>", "Paris"),  # last wins
        ("<answer>\n  Paris \t</answer>", "Paris"),  # white space stripped
        ("<answer>outer <answer>inner</answer></answer>", "inner"),  # innermost pair
        ("<answer></answer>", ""),
        ("<answer>Rome</answer><answer>Paris", "Rome"),  # unclosed last: not complete
        ("<answer>Paris", None),
        ("Paris</answer>", None),
        ("The answer is Paris.", None),
        ("<ANSWER>Paris</ANSWER>", None),  # protocol tags are case-sensitive
        ("", None),
    ],
)
def test_strict_answer(text: str, expected: str | None) -> None:
    assert strict_answer(text) == expected


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<answer>Paris</answer>", "Paris"),  # rule 1
        ("<answer></answer> The answer is Paris.", ""),  # rule 1 even when empty
        ("<think>x</think><answer> Paris ", "Paris"),  # rule 2: unclosed to end
        ("<answer>Paris</think> trailing", "Paris"),  # rule 2: up to next tag
        ("<answer>Rome <answer>Paris", "Paris"),  # rule 2: last open tag
        ("<answer>   ", None),  # rule 2 empty and no phrase
        ("<answer> </b> The answer is Lyon.", "Lyon"),  # rule 2 empty, falls to rule 3
        ("I think the answer is Paris. It is big.", "Paris"),  # rule 3
        ("Answer: Paris\nmore text", "Paris"),
        ("the answer is: 3.5 kg! really", "3.5 kg"),
        ("The answer is Washington D.C. and so on", "Washington D.C"),
        ("answer is A. Then the final answer is B.", "B"),  # last phrase wins
        ("The answer isn't known", None),
        ("no tags and no phrase", None),
    ],
)
def test_flexible_answer(text: str, expected: str | None) -> None:
    assert flexible_answer(text) == expected


def test_answer_only_in_non_final_call_is_not_found() -> None:
    calls = ["<answer>Paris</answer>", "I could not decide."]
    last_output = calls[-1]
    assert strict_answer(last_output) is None
    assert flexible_answer(last_output) is None


@given(st.text())
def test_flexible_agrees_with_strict_when_strict_exists(text: str) -> None:
    strict = strict_answer(text)
    if strict is not None:
        assert flexible_answer(text) == strict


@given(st.text(alphabet=st.characters(blacklist_characters="<>"), max_size=40))
def test_strict_returns_stripped_content(content: str) -> None:
    assert strict_answer(f"noise <answer>{content}</answer> tail") == content.strip()
