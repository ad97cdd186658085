"""Stop-string detection on the decoded text of generated tokens."""

from __future__ import annotations

import weakref
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase

# tokenizer -> {final characters of stop strings -> ids of tokens whose text holds one of them}
_ENDERS: weakref.WeakKeyDictionary[PreTrainedTokenizerBase, dict[frozenset[str], frozenset[int]]] = (
    weakref.WeakKeyDictionary()
)


def _tokens_holding(tokenizer: PreTrainedTokenizerBase, chars: frozenset[str]) -> frozenset[int]:
    """Ids of the tokens whose own decoded text contains one of `chars` (computed once per tokenizer)."""
    by_chars = _ENDERS.setdefault(tokenizer, {})
    if chars not in by_chars:
        texts = tokenizer.batch_decode([[i] for i in range(len(tokenizer))], skip_special_tokens=False)
        by_chars[chars] = frozenset(i for i, text in enumerate(texts) if any(c in text for c in chars))
    return by_chars[chars]


class StopStringChecker:
    """Says which sequences' generated text now contains a stop string.

    Checked after every token, so an occurrence can only be new: it ends inside the last token,
    whose own text must then hold the stop string's final character (an ASCII character is never
    split across tokens; with a non-ASCII final character every sequence is checked). Only those
    sequences are decoded, and only their last few tokens (enough to hold the longest stop string,
    each token being at least one byte), which is equivalent to decoding the whole text.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str]):
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        longest = max((len(s.encode("utf-8")) for s in self.stop), default=0)
        self.window = longest + 4  # margin for a multi-byte character cut at the window start
        finals = frozenset(s[-1] for s in self.stop)
        self.enders = _tokens_holding(tokenizer, finals) if finals and all(c.isascii() for c in finals) else None

    def hits(self, sequences: Sequence[Sequence[int]]) -> list[bool]:
        out = [False] * len(sequences)
        if not self.stop:
            return out
        candidates = [i for i, seq in enumerate(sequences) if seq and (self.enders is None or seq[-1] in self.enders)]
        if not candidates:
            return out
        tails = [list(sequences[i][-self.window :]) for i in candidates]
        for i, text in zip(candidates, self.tokenizer.batch_decode(tails, skip_special_tokens=True)):
            out[i] = any(s in text for s in self.stop)
        return out
