"""Question pools standing in for the paper's seven datasets.

nq, triviaqa, popqa: single-hop, three phrasing styles. hotpotqa: two-hop bridge
("Where was the person who directed X born?") and comparison. 2wiki: two-hop
composition ("the director of film X") and comparison. musique: two- and three-hop
composition. bamboogle: two-hop composition starting from books and companies.
Every question carries its hops: the sub-questions, their answers and the title of
the passage holding each answer.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from tqdm import tqdm

from pipeline.data.normalize import normalize_question
from pipeline.data.world_entities import KnowledgeBase
from pipeline.data.world_relations import BY_KEY, LOOPS, RELATIONS, Relation, aliases, count, name, order_key, value
from pipeline.errors import InputError

MAX_REJECTS_PER_QUESTION = 30


@dataclass
class Question:
    question: str
    golden_answers: list[str]
    family: str
    hops: list[dict[str, str]]


class _Draws:
    """Uniform numbers served from numpy blocks (one Generator call per block, not per draw)."""

    def __init__(self, rng: np.random.Generator, block: int = 1 << 16) -> None:
        self._rng, self._block = rng, block
        self._buf: list[float] = []
        self._pos = 0

    def uniform(self) -> float:
        if self._pos == len(self._buf):
            self._buf, self._pos = self._rng.random(self._block).tolist(), 0
        self._pos += 1
        return self._buf[self._pos - 1]

    def index(self, n: int) -> int:
        return min(int(self.uniform() * n), n - 1)

    def pick(self, items: list):
        return items[self.index(len(items))]

    def weighted(self, cumulative: np.ndarray) -> int:
        return min(int(np.searchsorted(cumulative, self.uniform() * cumulative[-1], side="right")), len(cumulative) - 1)


@dataclass(frozen=True)
class _Comparison:
    """'Which of a, b has the smaller/larger value' or 'do a and b share a value', along a chain."""

    subject: str
    chain: tuple[str, ...]
    template: str
    pick: str  # "min" | "max" | "same"


_HOTPOT_COMPARISONS = (
    _Comparison("film", ("film.year",), "Which film came out first, {a} or {b}?", "min"),
    _Comparison("person", ("person.birth_date",), "Who was born first, {a} or {b}?", "min"),
    _Comparison("company", ("company.founded",), "Which company was founded first, {a} or {b}?", "min"),
    _Comparison("person", ("person.birth_city",), "Were {a} and {b} born in the same city?", "same"),
    _Comparison("book", ("book.author",), "Were {a} and {b} written by the same person?", "same"),
)
_2WIKI_COMPARISONS = (
    _Comparison("film", ("film.year",), "Which film came out earlier, {a} or {b}?", "min"),
    _Comparison("person", ("person.birth_date",), "Who was born later, {a} or {b}?", "max"),
    _Comparison("book", ("book.year",), "Which book was published first, {a} or {b}?", "min"),
    _Comparison("film", ("film.director", "person.birth_date"),
                "Which film has the director born earlier, {a} or {b}?", "min"),
    _Comparison("film", ("film.country",), "Are the films {a} and {b} from the same country?", "same"),
)


def _chains(starts: tuple[str, ...], n_hops: int) -> list[tuple[str, ...]]:
    """All relation chains of n_hops from the given subject types (entity-valued steps, any last step)."""
    out: list[tuple[str, ...]] = [(r.key,) for r in RELATIONS if r.subject in starts]
    for _ in range(n_hops - 1):
        out = [
            c + (r.key,) for c in out if BY_KEY[c[-1]].target is not None
            for r in RELATIONS if r.subject == BY_KEY[c[-1]].target and (c[-1], r.key) not in LOOPS
        ]
    return out


class QuestionMaker:
    """Draws random questions of each dataset from a knowledge base."""

    def __init__(self, kb: KnowledgeBase, rng: np.random.Generator) -> None:
        self.kb = kb
        self.draws = _Draws(rng)
        self._single: dict[str, tuple[list[tuple[Relation, str]], np.ndarray]] = {}
        for style in ("nq", "triviaqa", "popqa"):
            options = [(r, t) for r in RELATIONS for t in r.styles[style]]
            weights = np.cumsum([count(kb, r.subject) for r, _ in options], dtype=float)
            self._single[style] = (options, weights)
        self._chain_sets = {
            "hotpotqa": self._chain_set(("film", "book", "company"), (2,)),
            "2wiki": self._chain_set(("film",), (2,)),
            "musique": self._chain_set(("person", "film", "city", "book"), (2, 3)),
            "bamboogle": self._chain_set(("company", "book"), (2,)),
        }
        self._groups: dict[tuple[str, ...], dict] = {}
        self.makers: dict[str, Callable[[], Question | None]] = {
            "nq": lambda: self.single("nq"),
            "triviaqa": lambda: self.single("triviaqa"),
            "popqa": lambda: self.single("popqa"),
            "hotpotqa": lambda: self.either(0.55, lambda: self.composed("hotpotqa", "clause", "bridge"),
                                            lambda: self.compare(_HOTPOT_COMPARISONS)),
            "2wiki": lambda: self.either(0.5, lambda: self.composed("2wiki", "noun", "composition"),
                                         lambda: self.compare(_2WIKI_COMPARISONS)),
            "musique": lambda: self.composed("musique", "noun", "composition"),
            "bamboogle": lambda: self.composed("bamboogle", "noun", "composition"),
        }

    def _chain_set(self, starts: tuple[str, ...], hop_counts: tuple[int, ...]) -> tuple[list, np.ndarray]:
        chains = [c for n in hop_counts for c in _chains(starts, n)]
        # Each hop count gets an equal share; inside it, chains weigh by their number of subjects.
        weights = []
        for c in chains:
            same_len = [d for d in chains if len(d) == len(c)]
            total = sum(count(self.kb, BY_KEY[d[0]].subject) for d in same_len)
            weights.append(count(self.kb, BY_KEY[c[0]].subject) / total)
        return chains, np.cumsum(weights)

    def either(self, p_first: float, first: Callable, second: Callable) -> Question | None:
        return first() if self.draws.uniform() < p_first else second()

    def _hop(self, rel: Relation, subject: int, v) -> dict[str, str]:
        title = name(self.kb, rel.subject, subject)
        return {"question": rel.ask.format(s=title), "answer": aliases(self.kb, rel, v)[0], "title": title}

    def _walk(self, chain: tuple[str, ...], start: int) -> tuple[list[dict[str, str]], object] | None:
        """Follow a chain from a subject: its hops and the final value (None if a link is missing)."""
        hops, subject = [], start
        for key in chain:
            v = value(self.kb, key, subject)
            if v is None:
                return None
            hops.append(self._hop(BY_KEY[key], subject, v))
            subject = v
        return hops, subject

    def single(self, style: str) -> Question | None:
        options, weights = self._single[style]
        rel, template = options[self.draws.weighted(weights)]
        i = self.draws.index(count(self.kb, rel.subject))
        walked = self._walk((rel.key,), i)
        if walked is None:
            return None
        hops, v = walked
        text = template.format(s=name(self.kb, rel.subject, i))
        if style == "nq":
            text = text.lower()
        return Question(text, aliases(self.kb, rel, v), "single-hop", hops)

    def composed(self, dataset: str, phrase: str, family: str) -> Question | None:
        chains, weights = self._chain_sets[dataset]
        chain = chains[self.draws.weighted(weights)]
        first = BY_KEY[chain[0]]
        i = self.draws.index(count(self.kb, first.subject))
        walked = self._walk(chain, i)
        if walked is None:
            return None
        hops, v = walked
        np_text = name(self.kb, first.subject, i)
        if dataset == "2wiki" and first.subject == "film":
            np_text = f"film {np_text}"
        for key in chain[:-1]:
            np_text = getattr(BY_KEY[key], phrase).format(s=np_text)
        last = BY_KEY[chain[-1]]
        return Question(last.ask.format(s=np_text), aliases(self.kb, last, v), family, hops)

    def _group_of(self, cmp: _Comparison) -> dict:
        """Subjects grouped by their final chain value (to draw 'same' pairs half of the time)."""
        key = (cmp.subject,) + cmp.chain
        if key not in self._groups:
            groups: dict = {}
            for i in range(count(self.kb, cmp.subject)):
                walked = self._walk(cmp.chain, i)
                if walked is not None:
                    groups.setdefault(walked[1], []).append(i)
            self._groups[key] = groups
        return self._groups[key]

    def compare(self, comparisons: tuple[_Comparison, ...]) -> Question | None:
        cmp = comparisons[self.draws.index(len(comparisons))]
        n = count(self.kb, cmp.subject)
        a = self.draws.index(n)
        b = self.draws.index(n)
        if cmp.pick == "same" and self.draws.uniform() < 0.5:
            wa = self._walk(cmp.chain, a)
            if wa is not None:
                b = self.draws.pick(self._group_of(cmp)[wa[1]])
        wa, wb = self._walk(cmp.chain, a), self._walk(cmp.chain, b)
        if a == b or wa is None or wb is None:
            return None
        (hops_a, va), (hops_b, vb) = wa, wb
        na, nb = name(self.kb, cmp.subject, a), name(self.kb, cmp.subject, b)
        if cmp.pick == "same":
            answer = "yes" if va == vb else "no"
        else:
            ka, kb_ = order_key(va), order_key(vb)
            if ka == kb_:
                return None
            first_wins = (ka < kb_) == (cmp.pick == "min")
            answer = na if first_wins else nb
        return Question(cmp.template.format(a=na, b=nb), [answer], "comparison", hops_a + hops_b)


def make_pool(maker: QuestionMaker, dataset: str, n: int, seen: set[str], split: str) -> list[Question]:
    """n questions of one dataset whose normalised text is new to `seen` (which is updated)."""
    out: list[Question] = []
    rejects = 0
    make = maker.makers[dataset]
    with tqdm(total=n, desc=f"world {dataset}/{split}", unit="q", leave=False, mininterval=1.0) as bar:
        while len(out) < n:
            q = make()
            key = normalize_question(q.question) if q is not None else None
            if key is None or key in seen:
                rejects += 1
                if rejects > MAX_REJECTS_PER_QUESTION * n + 1000:
                    raise InputError(
                        f"WorldConfig: cannot make {n} distinct {dataset} {split} questions "
                        f"(got {len(out)}); raise the entity counts or lower the pool size"
                    )
                continue
            seen.add(key)
            out.append(q)
            bar.update(1)
    return out


def hops_json(q: Question) -> str:
    return json.dumps(q.hops, ensure_ascii=False)
