"""What agents need from retrieval: a batched top-k search returning passages."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable


@dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    score: float = 0.0
    stored_contents: str | None = field(default=None, compare=False, repr=False)  # as read, if read

    @property
    def contents(self) -> str:
        """The corpus `contents` string it was read from, else the wiki-18 form '"Title"\\ntext'."""
        return self.stored_contents if self.stored_contents is not None else f'"{self.title}"\n{self.text}'


@runtime_checkable
class Retriever(Protocol):
    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        """Top-k passages for every query, best first; all queries in one batch."""


def format_information(passages: Sequence[Passage]) -> str:
    """The body of a Search-R1 <information> block, character for character: its
    `_passages2string` ('Doc i(Title: <first line of contents as stored>) <the other lines>'
    plus a newline, per passage) stripped, as Search-R1 strips it before wrapping it in tags."""
    lines = []
    for i, passage in enumerate(passages, 1):
        title_line, _, text = passage.contents.partition("\n")
        lines.append(f"Doc {i}(Title: {title_line}) {text}\n")
    return "".join(lines).strip()
