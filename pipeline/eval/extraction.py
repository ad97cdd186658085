"""Answer extraction from the last Answerer output (docs/method.md §7).

`strict_answer` is the headline rule; `flexible_answer` is a diagnostic rule fixed in
advance that never looks at the gold answers.
"""

from __future__ import annotations

import re

# An innermost complete pair: the content may not itself contain an answer tag, so in
# "<answer>a <answer>b</answer></answer>" the complete pair is the one around "b".
_COMPLETE_ANSWER = re.compile(r"<answer>((?:(?!</?answer>).)*?)</answer>", re.DOTALL)
_OPEN_TAG = "<answer>"
_ANY_TAG = re.compile(r"</?[A-Za-z_][\w-]*>")
_ANSWER_PHRASE = re.compile(r"\banswer(?:\s+is\b\s*:?|\s*:)", re.IGNORECASE)
# End of a sentence: . ! ? followed by white space or the end of the text (so "3.5"
# and "U.S.A" stay whole), a line break, or the start of a tag.
_SENTENCE_END = re.compile(r"[.!?](?=\s|$)|\n|<")


def strict_answer(last_answerer_output: str) -> str | None:
    """Content of the last complete `<answer>...</answer>` pair, stripped of white space.

    Tags are case-sensitive (the action protocol's tags). With nested tags the innermost
    complete pair counts. `"<answer></answer>"` gives `""` (an answer that is never
    correct); no complete pair gives None.
    """
    matches = _COMPLETE_ANSWER.findall(last_answerer_output)
    if not matches:
        return None
    return matches[-1].strip()


def flexible_answer(text: str) -> str | None:
    """Diagnostic extraction; the first rule that yields a result wins.

    1. The strict answer (`strict_answer`), even when it is `""`.
    2. Unclosed tag (only reached when the text has no complete pair at all): the
       text after the last `<answer>` up to the next tag of any kind (`<x>` or `</x>`)
       or the end of the text, stripped; used only when non-empty.
    3. Answer phrase: after the last case-insensitive "answer is" (an optional ":" may
       follow) or "answer:", the text up to the first sentence end (". ", "! ", "? ",
       a final ".", a line break, or a "<"), stripped; used only when non-empty.
    4. Otherwise None.
    """
    strict = strict_answer(text)
    if strict is not None:
        return strict
    unclosed = _after_last_open_tag(text)
    if unclosed:
        return unclosed
    phrase = _after_last_answer_phrase(text)
    if phrase:
        return phrase
    return None


def _after_last_open_tag(text: str) -> str | None:
    start = text.rfind(_OPEN_TAG)
    if start < 0:
        return None
    rest = text[start + len(_OPEN_TAG):]
    next_tag = _ANY_TAG.search(rest)
    content = rest[: next_tag.start()] if next_tag else rest
    return content.strip() or None


def _after_last_answer_phrase(text: str) -> str | None:
    matches = list(_ANSWER_PHRASE.finditer(text))
    if not matches:
        return None
    rest = text[matches[-1].end():]
    end = _SENTENCE_END.search(rest)
    content = rest[: end.start()] if end else rest
    return content.strip() or None
