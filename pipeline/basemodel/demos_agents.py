"""Rule-based Searcher, Leader, Answerer and judge that write the format warm-up demonstrations.

They play real episodes of both workflows on training questions: real retrieval
(through `CachedSearch`, one batched retriever call per chunk of questions), the
question's hops as their privileged plan, and the exact prompts and action text of
`pipeline.agents`. They are deliberately imperfect (skipped searches, vague queries,
wrong picks, noisy judge scores) so that reinforcement learning has room to improve.
Each produces `Demo`s: one prompt and the turns the model should write.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from pipeline.agents.prompts import Prompts, ReportLine
from pipeline.agents.protocol import Answer, AnswerWith, Dispatch, Report, Search, render_action
from pipeline.agents.searcher import observation_text
from pipeline.basemodel.demos_text import (
    comparison_options,
    contains,
    find_sentence,
    other_sentence,
    phrases,
    vague_query,
)
from pipeline.data.sentences import sentences
from pipeline.eval.funnel import holds, words
from pipeline.retrieval.base import Passage, Retriever, format_information

CHAIN_FAMILIES = ("bridge", "composition")  # questions whose hops follow each other

@dataclass(frozen=True)
class Turn:
    """One generated turn and the observation the environment appends after it ("" if none)."""

    completion: str
    observation: str = ""


@dataclass(frozen=True)
class Demo:
    role: str  # searcher | answerer | leader | judge
    prompt: str
    turns: tuple[Turn, ...]
    question_id: str
    workflow: str  # cascade | hierarchy


@dataclass(frozen=True)
class DemoRates:
    """Imperfection rates of the scripted team (each a probability)."""

    skip_search: float = 0.1  # Searcher reports without searching; Leader hands over nothing
    vague_query: float = 0.2  # first query is a vague variant of the task
    wrong_pick: float = 0.1  # wrong sentence in a report, wrong reports or wrong answer picked
    judge_noise: float = 0.2  # judge score drawn uniformly from 0..10


@dataclass(frozen=True)
class Hop:
    question: str
    answer: str
    title: str


class CachedSearch:
    """Top-k retrieval through a cache. While `recording`, a query not in the cache is
    noted in `misses` and answered with no passages; `fetch_misses` then retrieves every
    noted query in one batched call (episodes are replayed until nothing is missed)."""

    def __init__(self, retriever: Retriever, k: int) -> None:
        self.retriever, self.k = retriever, k
        self.cache: dict[str, list[Passage]] = {}
        self.misses: list[str] = []
        self.recording = False
        self.batches = 0

    def fetch(self, queries: Sequence[str]) -> None:
        missing = list(dict.fromkeys(q for q in queries if q not in self.cache))
        if missing:
            self.batches += 1
            self.cache.update(zip(missing, self.retriever.search(missing, self.k)))

    def fetch_misses(self) -> int:
        """Retrieve the noted misses; returns how many there were."""
        misses, self.misses = self.misses, []
        self.fetch(misses)
        return len(set(misses))

    def __call__(self, query: str) -> list[Passage]:
        if query not in self.cache:
            if self.recording:
                self.misses.append(query)
                return []
            self.fetch([query])
        return self.cache[query]


@dataclass
class SearcherRun:
    """What a scripted Searcher did: its turns, its report and what it read."""

    turns: list[Turn] = field(default_factory=list)
    report: str = ""
    passages_text: str = ""
    read: str = ""  # all retrieved text, to check what it could know


def run_searcher(
    task: str,
    needed: Sequence[Hop],
    report_hops: Sequence[Hop],
    search: Callable[[str], list[Passage]],
    rng: random.Random,
    rates: DemoRates,
    max_searches: int,
    hop_by_hop: bool = False,
) -> SearcherRun:
    """Search (task first, then the sub-question of each hop still missing) and report the
    sentences holding the answers of `report_hops`. With `hop_by_hop` (a chain question), the
    first query is the first hop's sub-question and each next one the next hop's whose answer it
    has not read (as whole words), in order."""
    run = SearcherRun()
    if rng.random() < rates.skip_search or max_searches < 1:
        run.turns.append(Turn(render_action(Report(""))))
        return run
    if hop_by_hop:
        return _hop_by_hop(run, task, needed, report_hops, search, rng, rates, max_searches)
    query = vague_query(task, needed[0].title) if rng.random() < rates.vague_query else task
    asked: list[str] = []  # in order: a set's order changes with PYTHONHASHSEED, and the report with it
    last: list[Passage] = []
    for _ in range(max_searches):
        last = search(query)
        asked.append(query)
        run.turns.append(Turn(render_action(Search(query)), observation_text(last)))
        body = format_information(last)
        run.passages_text = f"{run.passages_text}\n{body}" if run.passages_text else body
        run.read += " " + " ".join(p.text for p in last)
        missing = [h for h in needed if not contains(run.read, h.answer)]
        if not missing:
            break
        query = missing[0].question if missing[0].question not in asked else task
        if query in asked:
            break
    run.report = _report(run.read, last, report_hops, search, asked, rng, rates)
    run.turns.append(Turn(render_action(Report(run.report))))
    return run


def _hop_by_hop(run: SearcherRun, task: str, hops: Sequence[Hop], report_hops: Sequence[Hop],
                search: Callable[[str], list[Passage]], rng: random.Random, rates: DemoRates,
                max_searches: int) -> SearcherRun:
    asked: list[str] = []
    last: list[Passage] = []
    first = hops[0].question
    queries = iter([vague_query(first, hops[0].title) if rng.random() < rates.vague_query else first,
                    *(h.question for h in hops[1:])])
    for hop, query in zip(hops, queries):
        if len(asked) == max_searches:
            break
        if asked and holds(words(run.read), [hop.answer]):
            continue
        last = search(query)
        asked.append(query)
        run.turns.append(Turn(render_action(Search(query)), observation_text(last)))
        body = format_information(last)
        run.passages_text = f"{run.passages_text}\n{body}" if run.passages_text else body
        run.read += " " + " ".join(p.text for p in last)
    run.report = _report(run.read, last, report_hops, search, asked, rng, rates)
    run.turns.append(Turn(render_action(Report(run.report))))
    return run


def _report(
    read: str,
    last: list[Passage],
    hops: Sequence[Hop],
    search: Callable[[str], list[Passage]],
    asked: Sequence[str],
    rng: random.Random,
    rates: DemoRates,
) -> str:
    """One sentence per hop, copied from the passages the Searcher retrieved."""
    retrieved = [p for q in asked for p in search(q)]  # cached: nothing new is retrieved
    parts: list[str] = []
    for hop in hops:
        sentence = None
        if rng.random() < rates.wrong_pick:
            sentence = other_sentence(retrieved, hop.answer, rng)
        elif contains(read, hop.answer):
            sentence = find_sentence(retrieved, hop.answer, hop.title)
        if sentence is None and last:
            sentence = sentences(last[0].text)[0]
        if sentence and sentence not in parts:
            parts.append(sentence)
    return " ".join(parts)


def answer_from_reports(
    question: str, family: str, hops: Sequence[Hop], golden: Sequence[str], reports_text: str,
    rng: random.Random, rates: DemoRates,
) -> str:
    """The Answerer's answer: copied from the reports when they hold it (for a comparison:
    the gold option when both compared values are reported), otherwise a guess from the
    reports or the question's options."""
    guesses = phrases(reports_text)
    wrong = rng.random() < rates.wrong_pick
    if family == "comparison":
        known = all(contains(reports_text, h.answer) for h in hops)
        options = comparison_options(question) or ("yes", "no")
        if golden and golden[0].lower() in ("yes", "no"):
            options = ("yes", "no")
        if known and not wrong and golden:
            return golden[0]
        return rng.choice(options)
    final = hops[-1].answer
    if contains(reports_text, final) and not wrong:
        start = reports_text.lower().index(final.lower())
        return reports_text[start : start + len(final)]
    others = [g for g in guesses if not contains(question, g)] or guesses
    return rng.choice(others) if others else ""


def judge_score(report: str, answer: str, rng: random.Random, rates: DemoRates) -> int:
    """0..10: high when the report holds the gold sub-answer, low otherwise, sometimes noise."""
    if rng.random() < rates.judge_noise:
        return rng.randint(0, 10)
    if not report.strip():
        return 0
    return rng.randint(7, 10) if contains(report, answer) else rng.randint(0, 3)


@dataclass
class Episode:
    """One question played by the scripted team; `demos` collects every call's Demo."""

    question_id: str
    question: str
    family: str
    hops: list[Hop]
    golden: list[str]
    demos: list[Demo] = field(default_factory=list)


def cascade_episode(
    ep: Episode, prompts: Prompts, search: Callable[[str], list[Passage]], rng: random.Random,
    rates: DemoRates, max_searches: int, hop_by_hop: bool = False,
) -> None:
    """Searcher (task = the question) then Answerer; with `hop_by_hop`, the Searcher of a chain
    question asks its hops one by one."""
    report_hops = ep.hops[-1:] if ep.family != "comparison" else ep.hops
    chain = hop_by_hop and ep.family in CHAIN_FAMILIES and len(ep.hops) >= 2
    run = run_searcher(ep.question, ep.hops, report_hops, search, rng, rates, max_searches, chain)
    ep.demos.append(Demo("searcher", prompts.searcher_prompt(ep.question), tuple(run.turns), ep.question_id, "cascade"))
    reports = [ReportLine("R1", ep.question, run.report)]
    answer = answer_from_reports(ep.question, ep.family, ep.hops, ep.golden, run.report, rng, rates)
    ep.demos.append(Demo("answerer", prompts.answerer_prompt(ep.question, reports),
                         (Turn(render_action(Answer(answer))),), ep.question_id, "cascade"))


def _next_tasks(ep: Episode, reports_text: str, dispatched: dict[str, int]) -> list[tuple[str, Hop]]:
    """The Leader's plan: (task, hop) pairs still to dispatch, each hop at most twice."""
    unresolved = [h for h in ep.hops if not contains(reports_text, h.answer)]
    if ep.family == "comparison":
        todo = unresolved
    elif unresolved and (unresolved[0] is ep.hops[0]
                         or contains(reports_text, ep.hops[ep.hops.index(unresolved[0]) - 1].answer)):
        todo = unresolved[:1]
    else:
        todo = []
    tasks = []
    for hop in todo:
        task = ep.question if ep.family == "single-hop" else hop.question
        if dispatched.get(task, 0) < 2:
            tasks.append((task, hop))
    return tasks


def hierarchy_episode(
    ep: Episode, prompts: Prompts, search: Callable[[str], list[Passage]], rng: random.Random,
    rates: DemoRates, max_searches: int, max_parallel: int, max_waves: int, budget: int,
) -> None:
    """Leader waves of Searchers (one per task), then Answerer; judge demos for each report.
    The Leader hands over once another wave might not fit in the step `budget` or `max_waves`."""
    reports: list[ReportLine] = []
    useful: list[str] = []
    dispatched: dict[str, int] = {}
    skip = rng.random() < rates.skip_search / 2
    waves = steps = 0
    while True:
        prompt = prompts.leader_prompt(ep.question, reports, max_parallel)
        text = " ".join(r.text for r in reports)
        room = waves < max_waves - 1 and steps + 2 + max_searches < budget
        tasks = _next_tasks(ep, text, dispatched)[:max_parallel] if room and not skip else []
        steps += 1
        if not tasks:
            chosen = _pick_reports(reports, useful, rng, rates)
            ep.demos.append(Demo("leader", prompt, (Turn(render_action(AnswerWith(tuple(chosen)))),),
                                 ep.question_id, "hierarchy"))
            break
        ep.demos.append(Demo("leader", prompt, (Turn(render_action(Dispatch(tuple(t for t, _ in tasks)))),),
                             ep.question_id, "hierarchy"))
        waves += 1
        wave_steps = 0
        for task, hop in tasks:
            dispatched[task] = dispatched.get(task, 0) + 1
            run = run_searcher(task, [hop], [hop], search, rng, rates, max_searches)
            wave_steps = max(wave_steps, len(run.turns))
            ep.demos.append(Demo("searcher", prompts.searcher_prompt(task), tuple(run.turns), ep.question_id,
                                 "hierarchy"))
            report_id = f"R{len(reports) + 1}"
            reports.append(ReportLine(report_id, task, run.report))
            if contains(run.report, hop.answer):
                useful.append(report_id)
            score = judge_score(run.report, hop.answer, rng, rates)
            ep.demos.append(Demo("judge", prompts.judge_prompt(task, run.passages_text, run.report),
                                 (Turn(f"<score>{score}</score>"),), ep.question_id, "hierarchy"))
        steps += wave_steps
    by_id = {r.report_id: r for r in reports}
    handed = [by_id[i] for i in chosen]
    answer = answer_from_reports(ep.question, ep.family, ep.hops, ep.golden,
                                 " ".join(r.text for r in handed), rng, rates)
    ep.demos.append(Demo("answerer", prompts.answerer_prompt(ep.question, handed),
                         (Turn(render_action(Answer(answer))),), ep.question_id, "hierarchy"))


def _pick_reports(reports: list[ReportLine], useful: list[str], rng: random.Random, rates: DemoRates) -> list[str]:
    """The reports the Leader hands over: the useful ones (all when none is), or a wrong pick."""
    ids = [r.report_id for r in reports]
    if not ids:
        return []
    if rng.random() < rates.wrong_pick:
        return [rng.choice(ids)]
    return useful or ids
