"""A byte-level BPE tokenizer trained from scratch for the tiny profile's model.

The protocol's tags are added as single, non-special tokens: the model sees each tag
as one symbol (easy to learn, easy to stop on) and `decode` keeps them in the text.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AddedToken, PreTrainedTokenizerFast

from pipeline.errors import InputError
from pipeline.io import atomic_dir

EOS_TOKEN = "<|endoftext|>"  # also bos: documents are separated by it, GPT-2 style
PAD_TOKEN = "<|pad|>"

PROTOCOL_TAGS: tuple[str, ...] = tuple(
    f"<{slash}{name}>"
    for name in (
        "think", "search", "information", "report", "answer",
        "dispatch", "task", "answer_with", "score",
    )
    for slash in ("", "/")
)


def train_bpe_tokenizer(
    texts: Iterable[str],
    vocab_size: int,
    out_dir: str | os.PathLike | None = None,
    max_token_length: int | None = None,
) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts`; optionally save it (atomically) to `out_dir`.

    `max_token_length` caps a merged token's length in characters: with short caps, rare
    names split into frequent syllable tokens, which a tiny model learns to copy.
    """
    base_vocab = len(pre_tokenizers.ByteLevel.alphabet()) + 2 + len(PROTOCOL_TAGS)
    if vocab_size <= base_vocab:
        raise InputError(f"vocab_size: expected more than {base_vocab} (bytes + specials + tags), got {vocab_size}")

    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size - len(PROTOCOL_TAGS),
        special_tokens=[EOS_TOKEN, PAD_TOKEN],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
        max_token_length=max_token_length,
    )
    n_texts = 0

    def counted() -> Iterable[str]:
        nonlocal n_texts
        for text in texts:
            n_texts += 1
            yield text

    bpe.train_from_iterator(counted(), trainer=trainer)
    if n_texts == 0:
        raise InputError("texts: expected at least one training text, got none")

    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        bos_token=EOS_TOKEN,
        eos_token=EOS_TOKEN,
        pad_token=PAD_TOKEN,
        clean_up_tokenization_spaces=False,
        model_max_length=1 << 20,
    )
    tokenizer.add_tokens(
        [AddedToken(tag, special=False, normalized=False, single_word=False) for tag in PROTOCOL_TAGS]
    )
    if out_dir is not None:
        save_tokenizer(tokenizer, out_dir)
    return tokenizer


def save_tokenizer(tokenizer: PreTrainedTokenizerFast, out_dir: str | os.PathLike) -> Path:
    """Write the tokenizer files into `out_dir` (replaced whole, atomically)."""
    with atomic_dir(out_dir) as tmp:
        tokenizer.save_pretrained(tmp)
    return Path(out_dir)
