"""What agents need from retrieval: a batched top-k search returning passages."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol, Sequence, runtime_checkable


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float = 0.0

    @property
    def contents(self) -> str:
        """wiki-18 corpus form: '"Title"\\ntext'."""
        return f'"{self.title}"\n{self.text}'


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-k passages for every query, best first; all queries in one batch."""


def format_information(passages: Sequence[Passage]) -> str:
    """Search-R1 observation body: 'Doc 1(Title: t) text' lines."""
    return "\n".join(f"Doc {i}(Title: {p.title}) {p.text}" for i, p in enumerate(passages, 1))
