"""wiki-18 `contents` strings ('"Title"\\ntext') split back into title and text."""

from __future__ import annotations


def split_contents(contents: str) -> tuple[str, str]:
    """FlashRAG convention: first line is the quoted title, the rest is the text."""
    first, _, rest = contents.partition("\n")
    return first.strip().strip('"'), rest


def join_contents(title: str, text: str) -> str:
    """Inverse of split_contents (same form as Passage.contents)."""
    return f'"{title}"\n{text}'
