"""A passage's sentences: the synthetic world ends each one with a full stop and writes no
abbreviations, so a full stop followed by white space ends a sentence."""

from __future__ import annotations

import re

_SENTENCE_END = re.compile(r"(?<=\.)\s+")


def sentences(text: str) -> list[str]:
    """Split a passage into its sentences."""
    return [s.strip() for s in _SENTENCE_END.split(text) if s.strip()]
