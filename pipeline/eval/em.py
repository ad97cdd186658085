"""Normalised exact match against gold aliases (docs/method.md §7).

The one exact match of the project: evaluation records and the training reward both call
`exact_match`. On every string input it gives what FlashRAG's `ExactMatch.calculate_em` and
Search-R1's `em_check` give: a single gold string is one alias, and a prediction equals an
alias when both SQuAD-normalise to the same string, the empty string included ("The The",
"A+" and "!!!" all normalise to ""). `None` means the workflow produced no answer (a format
failure) and is never correct; the references have no such value.
"""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.data.normalize import normalize_answer
from pipeline.errors import InputError


def _aliases(golden: str | Iterable[str]) -> list[str]:
    if isinstance(golden, str):
        return [golden]
    if not isinstance(golden, Iterable):
        raise InputError(f"golden_answers: expected a string or a list of strings, got {type(golden).__name__}")
    aliases = list(golden)
    for alias in aliases:
        if not isinstance(alias, str):
            raise InputError(f"golden_answers: expected strings, got {type(alias).__name__} ({alias!r})")
    return aliases


def exact_match(prediction: str | None, golden: str | Iterable[str]) -> bool:
    """True when the SQuAD-normalised prediction equals a normalised gold alias.

    `golden` is a list (or array) of aliases or a single alias. An empty alias list matches
    nothing; `None` (no extracted answer) is never correct.
    """
    aliases = _aliases(golden)
    if prediction is None:
        return False
    if not isinstance(prediction, str):
        raise InputError(f"prediction: expected a string or None, got {type(prediction).__name__}")
    predicted = normalize_answer(prediction)
    return any(normalize_answer(alias) == predicted for alias in aliases)
