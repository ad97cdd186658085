"""Stop-string detection on the decoded text of generated tokens."""

from __future__ import annotations

from typing import Sequence

from transformers import PreTrainedTokenizerBase


class StopStringChecker:
    """Says which sequences' generated text now contains a stop string.

    Checked after every token, so an occurrence can only be new: decoding the last few
    tokens (enough to hold the longest stop string, each token being at least one byte)
    is equivalent to decoding the whole text, and costs O(1) per step.
    """

    def __init__(self, tokenizer: PreTrainedTokenizerBase, stop: Sequence[str]):
        self.tokenizer = tokenizer
        self.stop = tuple(s for s in stop if s)
        longest = max((len(s.encode("utf-8")) for s in self.stop), default=0)
        self.window = longest + 4  # margin for a multi-byte character cut at the window start

    def hits(self, sequences: Sequence[Sequence[int]]) -> list[bool]:
        if not self.stop:
            return [False] * len(sequences)
        tails = [list(seq[-self.window :]) for seq in sequences]
        texts = self.tokenizer.batch_decode(tails, skip_special_tokens=True)
        return [any(s in text for s in self.stop) for text in texts]
