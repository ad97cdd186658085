"""Scripted role demonstrations for the format warm-up of the tiny base model.

`build_demos` plays both workflows on TRAINING questions with the rule-based team of
`pipeline.basemodel.demos_agents` (real retriever, the questions' hops as the plan) until
every role has its quota of demonstrations. `demo_examples` turns them into
(prompt ids, completion ids) pairs for `supervised_finetune`: a multi-turn Searcher
demo becomes one example per turn whose prompt is the context so far (role prompt,
earlier turns and their observations), so observation text is only ever context and
never carries loss. Prompt ids come from `encode_prompt_ids`, turn and observation ids
from `encode_text_ids`: exactly how a rollout builds a Searcher's context.
"""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import pandas as pd
from transformers import PreTrainedTokenizerBase

from pipeline.agents.prompts import Prompts
from pipeline.basemodel.demos_agents import (
    CachedSearch,
    Demo,
    DemoRates,
    Episode,
    Hop,
    Turn,
    cascade_episode,
    hierarchy_episode,
)
from pipeline.errors import InputError
from pipeline.policy.encoding import encode_prompt_ids, encode_text_ids
from pipeline.retrieval.base import Retriever

__all__ = ["Demo", "DemoConfig", "DemoRates", "Turn", "build_demos", "demo_examples", "demo_sequences", "demo_texts"]

DEMO_ROLES = ("searcher", "answerer", "leader", "judge")
_CHUNK = 48  # questions played together: their searches are retrieved in one batch per replay


@dataclass(frozen=True)
class DemoConfig:
    """How many demonstrations per role, the team's imperfections and the protocol budgets."""

    searcher: int
    answerer: int
    leader: int
    judge: int
    rates: DemoRates
    top_k: int = 3
    max_searches: int = 3  # searches per Searcher (its last turn must be the report)
    hop_by_hop: bool = False  # the cascade's Searcher asks a chain question's hops one by one
    max_parallel: int = 3
    max_waves: int = 5
    hierarchy_steps: int = 12
    seed: int = 0

    def quota(self, role: str) -> int:
        return int(getattr(self, role))


def training_episodes(train: pd.DataFrame) -> list[Episode]:
    """Episodes of the training split; `hops` (JSON list of {question, answer, title}) is required."""
    for column in ("id", "question", "golden_answers", "family", "hops", "split"):
        if column not in train.columns:
            raise InputError(f"train split: missing column {column!r} (the synthetic world's splits have it)")
    not_train = train.loc[train["split"] != "train", "id"]
    if len(not_train):
        raise InputError(f"train split: question {not_train.iloc[0]!r} is not a training question")
    episodes = []
    for row in train.itertuples(index=False):
        try:
            hops = [Hop(h["question"], h["answer"], h["title"]) for h in json.loads(row.hops)]
        except (ValueError, KeyError, TypeError) as exc:
            raise InputError(f"train split: question {row.id!r}: field 'hops' is not a JSON hop list: {exc}") from exc
        if not hops:
            raise InputError(f"train split: question {row.id!r}: field 'hops' is empty")
        episodes.append(Episode(str(row.id), str(row.question), str(row.family), hops,
                                [str(g) for g in row.golden_answers]))
    return episodes


def _play(chunk: list[Episode], prompts: Prompts, search: CachedSearch, cfg: DemoConfig, seed: int) -> list[Demo]:
    """Both workflows on every episode of a chunk; the same seed gives the same decisions."""
    rng = random.Random(seed)
    demos = []
    for ep in chunk:
        ep.demos.clear()
        cascade_episode(ep, prompts, search, rng, cfg.rates, cfg.max_searches, cfg.hop_by_hop)
        hierarchy_episode(ep, prompts, search, rng, cfg.rates, cfg.max_searches, cfg.max_parallel,
                          cfg.max_waves, cfg.hierarchy_steps)
        demos.extend(ep.demos)
        ep.demos.clear()
    return demos


def build_demos(train: pd.DataFrame, retriever: Retriever, prompts: Prompts, cfg: DemoConfig) -> list[Demo]:
    """Demonstrations of every role from cascade and hierarchy episodes on `train` questions
    (shuffled with cfg.seed), until each role has its quota or the questions run out.

    Each chunk of questions is replayed with a recording cache until it misses no query,
    so all searches of one replay go to the retriever as one batch."""
    episodes = training_episodes(train)
    random.Random(cfg.seed).shuffle(episodes)
    search = CachedSearch(retriever, cfg.top_k)
    counts: Counter[str] = Counter()
    demos: list[Demo] = []
    for start in range(0, len(episodes), _CHUNK):
        if all(counts[r] >= cfg.quota(r) for r in DEMO_ROLES):
            break
        chunk = episodes[start : start + _CHUNK]
        search.recording = True
        while True:
            played = _play(chunk, prompts, search, cfg, cfg.seed * 1_000_003 + start)
            if not search.fetch_misses():
                break
        search.recording = False
        for demo in played:
            if counts[demo.role] < cfg.quota(demo.role):
                counts[demo.role] += 1
                demos.append(demo)
    return demos


def demo_texts(demos: Iterable[Demo]) -> Iterable[str]:
    """The full text of every demonstration (prompt, turns, observations): tokenizer training."""
    for demo in demos:
        yield demo.prompt + "".join(t.completion + t.observation for t in demo.turns)


def demo_examples(
    demos: Sequence[Demo], tokenizer: PreTrainedTokenizerBase, append_eos: bool = True
) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids): one pair per generated turn; `append_eos` ends each
    completion with eos (the judge's <score> is no stop tag, so its call ends on eos)."""
    eos = tokenizer.eos_token_id
    examples = []
    for demo in demos:
        context = encode_prompt_ids(tokenizer, demo.prompt)
        for turn in demo.turns:
            completion = encode_text_ids(tokenizer, turn.completion)
            examples.append((list(context), completion + ([eos] if append_eos and eos is not None else [])))
            context += completion + (encode_text_ids(tokenizer, turn.observation) if turn.observation else [])
    return examples


def demo_sequences(
    demos: Sequence[Demo], tokenizer: PreTrainedTokenizerBase, append_eos: bool = False
) -> list[tuple[list[int], list[int], list[int]]]:
    """(prompt ids, transcript ids, loss mask): one triple per demonstration, its turns and
    observations in one sequence with the observations masked out. A causal model sees each
    turn in exactly the context `demo_examples` gives it, so the loss is the same as over the
    per-turn examples, at the cost of one forward pass instead of one per turn."""
    eos = tokenizer.eos_token_id
    sequences = []
    for demo in demos:
        ids: list[int] = []
        mask: list[int] = []
        for turn in demo.turns:
            completion = encode_text_ids(tokenizer, turn.completion)
            if append_eos and eos is not None:
                completion.append(eos)
            observation = encode_text_ids(tokenizer, turn.observation) if turn.observation else []
            ids += completion + observation
            mask += [1] * len(completion) + [0] * len(observation)
        sequences.append((encode_prompt_ids(tokenizer, demo.prompt), ids, mask))
    return sequences


def demo_stats(demos: Sequence[Demo]) -> dict[str, float]:
    """Counts and behaviour of the demonstrations (logged beside the model)."""
    stats: dict[str, float] = {f"demos_{r}": 0 for r in DEMO_ROLES}
    searches = 0
    searchers = 0
    for demo in demos:
        stats[f"demos_{demo.role}"] += 1
        if demo.role == "searcher":
            searchers += 1
            searches += sum(t.completion.startswith("<search>") for t in demo.turns)
    stats["demos_searches_per_searcher"] = searches / max(searchers, 1)
    stats["demos_questions"] = len({d.question_id for d in demos})
    return stats
