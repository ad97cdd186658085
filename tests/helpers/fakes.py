"""Test doubles shared by the test suite: a scripted PolicyBackend and a tiny Retriever.

FakeBackend is character-level: token id = code point + 1, id 0 = BOS (only in
`encode_prompt`). Its `generate` asks a script for the completion of the decoded
context, applies the stop strings and `max_new_tokens` like a real backend, and gives
deterministic fake log-probs. It counts every call and batch size.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.policy.base import Generation, SamplingParams
from pipeline.policy.sampling_seeds import sample_seeds
from pipeline.retrieval.base import Passage

BOS = 0
ROLE_MARKERS = {"leader": "\nLeader:", "searcher": "\nSearcher:", "answerer": "\nAnswerer:", "judge": "\nJudge:"}


def fake_logprob(token_id: int, pos: int) -> float:
    """Deterministic, token- and position-dependent, always negative."""
    return -0.05 - ((token_id * 7 + pos) % 13) / 100.0


def role_of(context: str) -> str:
    """Which role prompt a context starts from (by the prompt's last line marker)."""
    for role, marker in ROLE_MARKERS.items():
        if marker in context:
            return role
    raise ValueError(f"no role marker in context {context[:80]!r}")


def field_of(context: str, name: str) -> str:
    """Value of a 'Name: value' line of the prompt."""
    match = re.search(rf"^{name}: (.*)$", context, re.MULTILINE)
    return match.group(1) if match else ""


class FakeBackend:
    """Scripted PolicyBackend; `script(context_text) -> completion_text`."""

    def __init__(self, script: Callable[[str], str]) -> None:
        self.script = script
        self.generate_calls: list[dict] = []  # {"batch": int, "n": int, "params": SamplingParams}
        self.contexts: list[str] = []  # every decoded prompt passed to generate
        self.score_calls: list[int] = []

    def encode_prompt(self, text: str) -> list[int]:
        return [BOS] + self.encode(text)

    def encode(self, text: str) -> list[int]:
        return [ord(ch) + 1 for ch in text]

    def decode(self, ids: Sequence[int]) -> str:
        return "".join(chr(i - 1) for i in ids if i != BOS)

    def _sample(self, completion: str, params: SamplingParams) -> Generation:
        ends = [completion.find(s) + len(s) for s in params.stop if s in completion]
        finish = "stop"
        if ends:
            completion = completion[: min(ends)]
        if len(completion) > params.max_new_tokens:
            completion, finish = completion[: params.max_new_tokens], "length"
        ids = self.encode(completion)
        return Generation(ids, [fake_logprob(t, p) for p, t in enumerate(ids)], completion, finish)

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        self.generate_calls.append({"batch": len(prompts), "n": n, "params": params})
        out = []
        for prompt in prompts:
            context = self.decode(prompt)
            self.contexts.append(context)
            out.append([self._sample(self.script(context), params) for _ in range(n)])
        return out

    def score(
        self, prompts: Sequence[Sequence[int]], responses: Sequence[Sequence[int]]
    ) -> list[list[float]]:
        self.score_calls.append(len(prompts))
        return [
            [fake_logprob(t + len(p), i) - 0.01 for i, t in enumerate(r)] for p, r in zip(prompts, responses)
        ]


class SeededBackend(FakeBackend):
    """FakeBackend whose samples depend on the sampling seed, as a real backend's do:
    `script(context, draw)` gets a number drawn from the entry's seed (row seed, or the call
    seed and the entry's place; pipeline.policy.sampling_seeds), so a call made with other
    seeds gives other completions."""

    def __init__(self, script: Callable[[str, int], str]) -> None:
        super().__init__(lambda context: "")
        self.seeded_script = script

    def generate(
        self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1
    ) -> list[list[Generation]]:
        self.generate_calls.append({"batch": len(prompts), "n": n, "params": params})
        out = []
        seeds = sample_seeds(params, len(prompts), n) or [None] * (len(prompts) * n)
        for i, prompt in enumerate(prompts):
            context = self.decode(prompt)
            self.contexts.append(context)
            draws = [int.from_bytes(hashlib.sha256(f"{seeds[i * n + k]}".encode()).digest()[:4], "big")
                     for k in range(n)]
            out.append([self._sample(self.seeded_script(context, d), params) for d in draws])
        return out


@dataclass
class TeamScript:
    """A configurable scripted team. Fixed `*_text` completions override the plan of that role."""

    n_searches: int = 1  # each Searcher searches this many times, then reports
    report: str = "paris is the capital"
    n_waves: int = 1  # the Leader dispatches this many waves, then answers with all reports
    tasks_per_wave: int = 2
    answer: str = "paris"
    think: bool = False
    trailing: str = ""  # text after the action (must be cut by the stop strings)
    leader_text: str | None = None
    searcher_text: str | None = None
    answerer_text: str | None = None
    calls: dict[str, int] = field(default_factory=dict)

    def _wrap(self, action: str) -> str:
        return ("<think>ok</think>" if self.think else "") + action + self.trailing

    def __call__(self, context: str) -> str:
        role = role_of(context)
        self.calls[role] = self.calls.get(role, 0) + 1
        if role == "searcher":
            if self.searcher_text is not None:
                return self.searcher_text
            turn = context.count("<information>")
            if turn < self.n_searches:
                return self._wrap(f"<search>{field_of(context, 'Task')} {turn}</search>")
            return self._wrap(f"<report>{self.report}</report>")
        if role == "answerer":
            return (self.answerer_text if self.answerer_text is not None
                    else self._wrap(f"<answer>{self.answer}</answer>"))
        if role == "leader":
            if self.leader_text is not None:
                return self.leader_text
            ids = re.findall(r"^(R[0-9]+) \[", context, re.MULTILINE)
            if len(ids) < self.n_waves * self.tasks_per_wave:
                question = field_of(context, "Question")
                tasks = "".join(f"<task>part {len(ids) + i} of {question}</task>" for i in range(self.tasks_per_wave))
                return self._wrap(f"<dispatch>{tasks}</dispatch>")
            return self._wrap(f"<answer_with>{','.join(ids)}</answer_with>")
        return "<score>7</score>"


DEFAULT_PASSAGES = (
    Passage("p0", "Paris", "Paris is the capital of France."),
    Passage("p1", "France", "France is a country in Europe."),
    Passage("p2", "Berlin", "Berlin is the capital of Germany."),
    Passage("p3", "Rome", "Rome is the capital of Italy."),
    Passage("p4", "Seine", "The Seine flows through Paris."),
)


class FakeRetriever:
    """Ranks a few passages by word overlap with the query; records every search call."""

    def __init__(self, passages: Sequence[Passage] = DEFAULT_PASSAGES) -> None:
        self.passages = list(passages)
        self.calls: list[list[str]] = []

    def search(self, queries: Sequence[str], k: int) -> list[list[Passage]]:
        self.calls.append(list(queries))
        return [self._ranked(q, k) for q in queries]

    def neighbours(self, texts: Sequence[str], k: int) -> list[list[Passage]]:
        """DenseRetriever.neighbours by word overlap (not recorded in `calls`)."""
        return [self._ranked(t, k) for t in texts]

    def _ranked(self, text: str, k: int) -> list[Passage]:
        words = set(text.lower().split())
        ranked = sorted(
            range(len(self.passages)),
            key=lambda i: (-len(words & set(self.passages[i].text.lower().rstrip(".").split())), i),
        )
        return [self.passages[i] for i in ranked[:k]]


def make_questions(n: int, dataset: str = "nq") -> list[dict]:
    return [
        {"question_id": f"{dataset}-{i}", "question": f"what is the capital of place {i}?",
         "golden_answers": ["paris", "Paris City"], "dataset": dataset}
        for i in range(n)
    ]
