"""wiki-18 `contents` strings ('"Title"\\ntext') split back into title and text: the one
parser of the project (the corpus loaders, FlashRAG corpora and the HTTP client use it).

The rule, as Search-R1 reads a line (`title = contents.split("\\n")[0]`, the rest the text):
  - the title is everything before the first "\\n", with spaces, tabs, carriage returns
    (TITLE_SPACE) trimmed at both ends and one pair of enclosing double quotes removed when the
    line both starts and ends with one (nested quotes inside stay: '""A" b"' -> '"A" b');
  - the text is everything after the first "\\n", as stored;
  - a string without "\\n" is all title, and the text is empty.
`split_contents` (one string) and `split_contents_array` (a pyarrow column, for corpora of
millions of lines) are the same rule; a test checks them against each other.
"""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

TITLE_SPACE = " \t\r\f\v"


def _title(first_line: str) -> str:
    first = first_line.strip(TITLE_SPACE)
    if len(first) >= 2 and first.startswith('"') and first.endswith('"'):
        return first[1:-1]
    return first


def split_contents(contents: str) -> tuple[str, str]:
    """'"Title"\\ntext' -> ("Title", "text") by the rule above."""
    first, _, rest = contents.partition("\n")
    return _title(first), rest


def split_contents_array(contents: pa.Array | pa.ChunkedArray) -> tuple[pa.ChunkedArray, pa.ChunkedArray]:
    """`split_contents` over a whole string column at once: (titles, texts)."""
    contents = pc.cast(contents, pa.large_string())
    parts = pc.extract_regex(contents, r"(?s)^(?P<first>[^\n]*)\n?(?P<rest>.*)$")
    first = pc.utf8_trim(pc.struct_field(parts, "first"), characters=TITLE_SPACE)
    title = pc.replace_substring_regex(first, pattern=r'(?s)^"(.*)"$', replacement=r"\1")
    text = pc.struct_field(parts, "rest")
    return pc.cast(title, pa.string()), pc.cast(text, pa.string())


def join_contents(title: str, text: str) -> str:
    """Inverse of split_contents for titles the rule keeps (same form as Passage.contents)."""
    return f'"{title}"\n{text}'
