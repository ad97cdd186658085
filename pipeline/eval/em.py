"""Normalised exact match against gold aliases (SPEC section 7)."""

from __future__ import annotations

from collections.abc import Iterable

from pipeline.data.normalize import normalize_answer
from pipeline.errors import InputError


def exact_match(prediction: str | None, golden: Iterable[str]) -> bool:
    """True when the SQuAD-normalised prediction equals a normalised gold alias.

    None (no answer) and predictions that normalise to "" are never correct; gold
    aliases that normalise to "" are ignored.
    """
    if isinstance(golden, str):
        raise InputError("golden_answers: expected a list of aliases, got a single string")
    aliases = list(golden)
    if prediction is None:
        return False
    predicted = normalize_answer(prediction)
    if not predicted:
        return False
    for alias in aliases:
        if not isinstance(alias, str):
            raise InputError(f"golden_answers: expected strings, got {type(alias).__name__}")
        if normalize_answer(alias) == predicted:
            return True
    return False
