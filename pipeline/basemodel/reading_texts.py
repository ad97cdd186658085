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
exactly, the skills every role needs. Given the index's `neighbours`, the other passages are
the ones nearest to the answer's passage in the E5 index (hard distractors, as a Searcher
sees them: another passage on the same entity, or the same relation about a namesake), so
the sentence must be picked by the question's entity and relation together; otherwise they
are random passages on other entities. They use no role prompt and no action tag, so the
roles' (deliberately imperfect) behaviour still comes from the demonstrations alone.

With `counterfactual` > 0, that share of the texts gets a twin whose hop answer is replaced after
the question line by another training answer of the same relation (pipeline.basemodel.counterfactual):
there the answer can only be copied from the passages, not recalled.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence

import pandas as pd

from pipeline.basemodel.counterfactual import AnswerPool, counterfactual_reading, seeded
from pipeline.basemodel.demos import training_episodes
from pipeline.basemodel.demos_text import find_sentence
from pipeline.errors import InputError
from pipeline.retrieval.base import Passage, format_information

Neighbours = Callable[[Sequence[str], int], list[list[Passage]]]  # passage texts, k -> nearest passages


def reading_texts(
    train: pd.DataFrame, passages: pd.DataFrame, n: int, distractors: int, seed: int,
    neighbours: Neighbours | None = None, counterfactual: float = 0.0,
) -> list[str]:
    """Up to `n` transcripts (one per answerable hop of the shuffled training questions),
    each with `distractors` other passages around the answer's passage, which takes a random
    place: its nearest passages by `neighbours` (one batched call), or random ones; then the
    counterfactual twins of a `counterfactual` share of them (drawn on a stream of their own, so
    the first texts are the same whatever the share)."""
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
    items: list[tuple[str, Passage, str, str]] = []  # question, answer's passage, sentence, answer span
    item_hops = []
    for hop, ep in ((h, e) for e in episodes for h in e.hops):
        if len(items) >= n:
            break
        sentence = find_sentence(by_title.get(hop.title, []), hop.answer, hop.title)
        if sentence is None:
            continue
        gold = next(p for p in by_title[hop.title] if sentence in p.text)
        question = ep.question if ep.family == "single-hop" else hop.question
        start = sentence.lower().index(hop.answer.lower())
        items.append((question, gold, sentence, sentence[start : start + len(hop.answer)]))
        item_hops.append(hop)
    if neighbours is not None and items:
        near = neighbours([gold.text for _, gold, _, _ in items], distractors + 1)
        others = [[p for p in found if p.text != gold.text][:distractors]
                  for (_, gold, _, _), found in zip(items, near)]
    else:
        others = [_random_others(gold, corpus, distractors, rng) for _, gold, _, _ in items]
    texts = []
    for (question, gold, sentence, span), docs in zip(items, others):
        docs.insert(rng.randint(0, len(docs)), gold)
        texts.append(f"Question: {question}\n{format_information(docs)}\nEvidence: {sentence}\nAnswer: {span}")
    if counterfactual > 0:
        pool = AnswerPool(episodes)
        for k, (text, hop) in enumerate(zip(list(texts), item_hops)):
            rng_k = seeded(seed, "reading", str(k))
            if rng_k.random() < counterfactual:
                twin = counterfactual_reading(text, hop, pool, rng_k)
                if twin is not None:
                    texts.append(twin)
    return texts


def _random_others(gold: Passage, corpus: Sequence[Passage], k: int, rng: random.Random) -> list[Passage]:
    return [p for p in rng.sample(corpus, min(len(corpus), k + 1)) if p.title != gold.title][:k]
