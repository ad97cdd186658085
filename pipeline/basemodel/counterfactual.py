"""Counterfactual copies of reading texts and Searcher demonstrations: the hop's answer replaced,
everywhere in the text the model reads and writes, by the answer of another training hop of the
same relation.

The tiny model is pre-trained on the corpus itself and learns it by heart (its pre-training loss
ends near 0.1), so on a real passage it can answer from memory as well as from the context, and
where the two blur it writes another month or surname than the passage's. In a counterfactual
copy only the context holds the answer: the model is trained to copy what it reads
(docs/tuning.md#a-searcher-that-reads). The replacement is a whole-word one ("Bo" is not
replaced inside "Boto"), consistent within a text, and never touches the role prompt (which holds
the task) or an answer the prompt names.
"""

from __future__ import annotations

import random
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import replace

from pipeline.basemodel.demos_agents import Demo, Episode, Hop, Turn


def relation_of(hop: Hop) -> str:
    """The hop's question with its subject taken out: "When was  born?" for every birth date."""
    text = re.sub(re.escape(hop.title), " ", hop.question, flags=re.IGNORECASE) if hop.title else hop.question
    return " ".join(text.lower().split())


def replace_words(text: str, old: str, new: str) -> str:
    """`text` with every whole-word occurrence of `old` replaced by `new`."""
    return re.sub(rf"(?<!\w){re.escape(old)}(?!\w)", lambda _: new, text) if old else text


def has_words(text: str, phrase: str) -> bool:
    return bool(phrase) and re.search(rf"(?<!\w){re.escape(phrase)}(?!\w)", text) is not None


class AnswerPool:
    """The answers of the training hops, by relation; `swap` draws another one of the same relation."""

    def __init__(self, episodes: Iterable[Episode]) -> None:
        pools: dict[str, set[str]] = {}
        self.relation: dict[str, str] = {}  # answer -> the relation it first answered
        for ep in episodes:
            for hop in ep.hops:
                key = relation_of(hop)
                pools.setdefault(key, set()).add(hop.answer)
                self.relation.setdefault(hop.answer, key)
        self.pools = {k: sorted(v) for k, v in pools.items()}

    def swap(self, answer: str, rng: random.Random, relation: str | None = None) -> str | None:
        """Another answer of `answer`'s relation (or `relation`); None when it has no other."""
        pool = self.pools.get(relation or self.relation.get(answer, ""), [])
        others = [a for a in pool if a != answer and not has_words(a, answer) and not has_words(answer, a)]
        return rng.choice(others) if others else None


def seeded(seed: int, *keys: str) -> random.Random:
    """A random stream of its own per (seed, keys): the same copy whatever else is drawn."""
    return random.Random(zlib.crc32("\x1f".join([str(seed), *keys]).encode("utf-8")))


def counterfactual_reading(text: str, hop: Hop, pool: AnswerPool, rng: random.Random) -> str | None:
    """A reading text (pipeline.basemodel.reading_texts) with the hop's answer replaced after the
    question line; None when the relation has no other answer or the question names the answer."""
    question, sep, rest = text.partition("\n")
    new = pool.swap(hop.answer, rng, relation_of(hop))
    if new is None or not sep or has_words(question, hop.answer):
        return None
    return question + sep + replace_words(rest, hop.answer, new)


def counterfactual_searchers(demos: Sequence[Demo], episodes: Sequence[Episode], share: float, seed: int
                             ) -> tuple[list[Demo], int]:
    """`demos` with a `share` of the Searcher demonstrations whose report holds a hop answer (one the
    prompt does not name) rewritten: each such answer replaced in every completion and observation.
    Returns the demonstrations (same order) and how many were rewritten."""
    if share <= 0:
        return list(demos), 0
    by_question = {ep.question_id: ep for ep in episodes}
    pool = AnswerPool(episodes)
    out, rewritten = [], 0
    for i, demo in enumerate(demos):
        ep = by_question.get(demo.question_id)
        if demo.role != "searcher" or ep is None or not demo.turns:
            out.append(demo)
            continue
        rng = seeded(seed, demo.question_id, demo.workflow, str(i))
        if rng.random() >= share:
            out.append(demo)
            continue
        report = demo.turns[-1].completion
        answers = [h for h in ep.hops if has_words(report, h.answer) and not has_words(demo.prompt, h.answer)]
        swaps = [(h.answer, pool.swap(h.answer, rng, relation_of(h))) for h in answers]
        swaps = [(old, new) for old, new in swaps if new is not None]
        if not swaps:
            out.append(demo)
            continue
        turns = []
        for turn in demo.turns:
            completion, observation = turn.completion, turn.observation
            for old, new in swaps:
                completion, observation = replace_words(completion, old, new), replace_words(observation, old, new)
            turns.append(Turn(completion, observation))
        out.append(replace(demo, turns=tuple(turns)))
        rewritten += 1
    return out, rewritten
