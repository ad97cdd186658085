"""Turning text into the token ids a model sees; shared by the backends and by fine-tuning,
so a demonstration's prompt is tokenised exactly like a rollout's prompt."""

from __future__ import annotations

import warnings
from collections.abc import Sequence

from transformers import PreTrainedTokenizerBase


def encode_prompt_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Role prompt ids: the chat template (one user message + generation prompt) when the
    tokenizer has one, else the plain encoding preceded by bos when one is defined."""
    if getattr(tokenizer, "chat_template", None):
        ids = tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if isinstance(ids, dict) or hasattr(ids, "input_ids"):  # BatchEncoding in transformers 5
            ids = ids["input_ids"]
        return [int(i) for i in ids]
    ids = tokenizer.encode(text, add_special_tokens=False)
    if tokenizer.bos_token_id is not None:
        ids = [tokenizer.bos_token_id] + ids
    return ids


def encode_text_ids(tokenizer: PreTrainedTokenizerBase, text: str) -> list[int]:
    """Ids of a piece of text inside a response: no special tokens added."""
    return tokenizer.encode(text, add_special_tokens=False)


class TokenizerText:
    """The text <-> ids half of PolicyBackend, shared by every backend with a `tokenizer`."""

    tokenizer: PreTrainedTokenizerBase

    def encode_prompt(self, text: str) -> list[int]:
        return encode_prompt_ids(self.tokenizer, text)

    def encode(self, text: str) -> list[int]:
        return encode_text_ids(self.tokenizer, text)

    def decode(self, ids: Sequence[int]) -> str:
        """Text of `ids`; special tokens (eos, pad) are dropped, protocol tags are kept."""
        return self.tokenizer.decode(list(ids), skip_special_tokens=True)


def truncate_left(ids: Sequence[int], max_len: int, what: str = "prompt") -> list[int]:
    """Keep the last `max_len` ids, warning when anything is dropped."""
    ids = list(ids)
    if len(ids) > max_len:
        warnings.warn(
            f"{what} of {len(ids)} tokens is longer than the {max_len} that fit; "
            f"truncated from the left",
            stacklevel=3,
        )
        return ids[len(ids) - max_len :]
    return ids
