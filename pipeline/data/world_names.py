"""Short, regular names for the synthetic world, and the text forms of dates.

Names are built from a small syllable inventory (consonant + vowel, twice, with an
optional final consonant: "Tavo", "Mirel", "Kesan"), so a tiny language model sees
every name piece often and can learn to copy them.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np

from pipeline.errors import InputError

ONSETS = ("b", "d", "k", "l", "m", "n", "p", "r", "s", "t", "v")
VOWELS = ("a", "e", "i", "o", "u")
CODAS = ("", "n", "l", "r", "s")

MONTHS = (
    "January", "February", "March", "April", "May", "June",
    "July", "August", "September", "October", "November", "December",
)


def all_words() -> list[str]:
    """Every two-syllable word of the inventory (11*5*11*5*5 = 15,125), capitalised, in a fixed order."""
    return [
        (c1 + v1 + c2 + v2 + coda).capitalize()
        for c1, v1, c2, v2, coda in itertools.product(ONSETS, VOWELS, ONSETS, VOWELS, CODAS)
    ]


class WordPool:
    """Hands out disjoint slices of a seeded shuffle of all words."""

    def __init__(self, rng: np.random.Generator) -> None:
        words = all_words()
        self._words = [words[i] for i in rng.permutation(len(words))]
        self._next = 0

    def take(self, n: int, what: str) -> list[str]:
        if self._next + n > len(self._words):
            raise InputError(
                f"WorldConfig: needs more than the {len(self._words)} distinct short names "
                f"(ran out while naming {what}); lower the entity counts"
            )
        out = self._words[self._next:self._next + n]
        self._next += n
        return out


def unique_pairs(
    rng: np.random.Generator, n: int, left: list[str], right: list[str], fmt: str, what: str
) -> list[str]:
    """n distinct strings fmt.format(a=left[i], b=right[j]), (i, j) drawn without replacement."""
    space = len(left) * len(right)
    if n > space:
        raise InputError(f"WorldConfig: {n} {what} asked for, but only {space} distinct names exist")
    flat = rng.choice(space, size=n, replace=False)
    return [fmt.format(a=left[k // len(right)], b=right[k % len(right)]) for k in flat.tolist()]


@dataclass(frozen=True)
class Date:
    year: int
    month: int  # 1..12
    day: int  # 1..28

    def dmy(self) -> str:
        return f"{self.day} {MONTHS[self.month - 1]} {self.year}"

    def aliases(self) -> list[str]:
        """'3 January 1950', 'January 3, 1950', 'Jan 3, 1950'."""
        month = MONTHS[self.month - 1]
        return [self.dmy(), f"{month} {self.day}, {self.year}", f"{month[:3]} {self.day}, {self.year}"]

    def ordinal(self) -> int:
        return self.year * 10000 + self.month * 100 + self.day
