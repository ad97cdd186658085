"""Copy-forcing pre-training texts: reading-comprehension transcripts from the training
questions and the corpus, for the tiny base model.

Each text asks a training question (the question itself when single-hop, otherwise one
hop's sub-question), shows the passage holding the answer among distractor passages in
the retriever's 'Doc i(Title: t) text' layout, then copies the sentence holding the
answer and the answer span:

    Question: where was nedus sibon born
    Doc 1(Title: ...) ...
    Evidence: Nedus Sibon was born in the city of Navun, Nuven.
    Answer: Navun

A tiny model learns from them to pick a sentence out of passages and to copy spans
exactly, the skills every role needs. They use no role prompt and no action tag, so the
roles' (deliberately imperfect) behaviour still comes from the demonstrations alone.
"""

from __future__ import annotations

import random
from typing import Sequence

import pandas as pd

from pipeline.io import InputError
from pipeline.policy.demos import training_episodes
from pipeline.policy.demos_text import find_sentence
from pipeline.retrieval.base import Passage, format_information


def reading_texts(train: pd.DataFrame, passages: pd.DataFrame, n: int, distractors: int, seed: int) -> list[str]:
    """Up to `n` transcripts (one per answerable hop of the shuffled training questions),
    each with `distractors` random other passages around the answer's passage."""
    for column in ("title", "text"):
        if column not in passages.columns:
            raise InputError(f"corpus: missing column {column!r}")
    corpus = [Passage(str(i), str(t), str(x)) for i, (t, x) in enumerate(zip(passages["title"], passages["text"]))]
    by_title: dict[str, list[Passage]] = {}
    for passage in corpus:
        by_title.setdefault(passage.title, []).append(passage)
    rng = random.Random(seed)
    episodes = training_episodes(train)
    rng.shuffle(episodes)
    texts: list[str] = []
    for ep in episodes:
        for hop in ep.hops:
            if len(texts) >= n:
                return texts
            sentence = find_sentence(by_title.get(hop.title, []), hop.answer, hop.title)
            if sentence is None:
                continue
            gold = next(p for p in by_title[hop.title] if sentence in p.text)
            question = ep.question if ep.family == "single-hop" else hop.question
            docs = _shuffled_with(gold, corpus, distractors, rng)
            start = sentence.lower().index(hop.answer.lower())
            texts.append(f"Question: {question}\n{format_information(docs)}\n"
                         f"Evidence: {sentence}\nAnswer: {sentence[start : start + len(hop.answer)]}")
    return texts


def _shuffled_with(gold: Passage, corpus: Sequence[Passage], k: int, rng: random.Random) -> list[Passage]:
    others = [p for p in rng.sample(corpus, min(len(corpus), k + 1)) if p.title != gold.title][:k]
    docs = [gold, *others]
    rng.shuffle(docs)
    return docs
