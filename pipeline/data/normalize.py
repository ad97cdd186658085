"""SQuAD answer normalisation (docs/method.md §7), shared by dedup and exact match."""

from __future__ import annotations

import re
import string
import unicodedata

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCT = set(string.punctuation)


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation, drop the articles a/an/the, collapse white space."""
    text = text.lower()
    text = "".join(ch for ch in text if ch not in _PUNCT)
    text = _ARTICLES.sub(" ", text)
    return " ".join(text.split())


def fold_unicode(text: str) -> str:
    """NFKD-decompose and drop combining marks, so 'Café' and 'Cafe' compare equal."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


def normalize_question(text: str) -> str:
    """Key for dedup and leakage checks: unicode folding, then SQuAD normalisation."""
    return normalize_answer(fold_unicode(text))
