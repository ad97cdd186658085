"""Text helpers of the scripted demonstrations: answer sentences, vague queries, answer guesses.

Everything here is deterministic: randomness comes from the caller's `random.Random`,
or (vague queries) from a stable hash of the text, so a query's vague variant is known
before the episode runs and can be retrieved in the same batch as the others.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Sequence

from pipeline.data.sentences import sentences
from pipeline.retrieval.base import Passage

# Capitalised names ("Rino Boto", "The River of Nabe") and years: what an answer looks like.
_PHRASE = re.compile(r"\b(?:[A-Z][a-z]+(?: (?:of |the )?[A-Z][a-z]+)*|\d{4})\b")
_OPTIONS = re.compile(r",\s*(.+?)\s+or\s+(.+?)\?\s*$")


def contains(haystack: str, needle: str) -> bool:
    """Case-insensitive containment; an empty needle is never contained."""
    return bool(needle) and needle.lower() in haystack.lower()


def find_sentence(passages: Sequence[Passage], answer: str, title: str) -> str | None:
    """The first sentence of the retrieved passages (best passage first) holding `answer`,
    preferring one that also names `title`; None when no passage holds the answer."""
    fallback = None
    for passage in passages:
        for sentence in sentences(passage.text):
            if contains(sentence, answer):
                if contains(sentence, title):
                    return sentence
                fallback = fallback or sentence
    return fallback


def other_sentence(passages: Sequence[Passage], answer: str, rng: random.Random) -> str | None:
    """A retrieved sentence that does not hold `answer` (a wrong pick); None when none."""
    pool = [s for p in passages for s in sentences(p.text) if not contains(s, answer)]
    return rng.choice(pool) if pool else None


def vague_query(text: str, title: str) -> str:
    """A worse query for `text`, the same every time for the same text: half of the
    time the entity `title` is dropped (retrieval then usually misses), otherwise
    about half of the other words are."""
    words = text.rstrip("?").split()
    seed = zlib.crc32(text.encode("utf-8"))
    if seed % 2 == 0 and title and contains(text, title):
        kept = re.sub(re.escape(title), "", text.rstrip("?"), flags=re.IGNORECASE).split()
    else:
        title_words = {w.lower() for w in title.split()}
        kept = [w for i, w in enumerate(words) if w.lower() in title_words or (seed >> (i % 24)) & 1]
    return " ".join(kept) or words[0]


def phrases(text: str) -> list[str]:
    """Name-like spans and years of a text, in order (candidates for a guessed answer)."""
    return _PHRASE.findall(text)


def comparison_options(question: str) -> tuple[str, str] | None:
    """('A', 'B') of 'Which ..., A or B?'; None for other questions."""
    match = _OPTIONS.search(question)
    return (match.group(1), match.group(2)) if match else None
