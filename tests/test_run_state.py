"""What a training checkpoint carries besides weights (pipeline.rl.run_state), piece by piece: the
prefix cache, an engine, the retriever's memory; and the thread count a stage computes with
(pipeline.threads) and how a run with other threads is named."""

from __future__ import annotations

import random

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline.draws.identity import draw_tags, threads_label
from pipeline.draws.record import default_name
from pipeline.engine.prefix_cache import PrefixCache
from pipeline.errors import ConfigError, InputError
from pipeline.retrieval.index import build_index
from pipeline.retrieval.retriever import DenseRetriever
from pipeline.rl import run_state
from pipeline.threads import THREADS_ENV, requested_threads, use_threads
from tests.conftest import REPO_ROOT
from tests.test_engine import engine, prompts, random_model, seeded, tokenizer  # noqa: F401 (fixtures)
from tests.test_retrieval_server import HashEncoder


def _kv(start: int, end: int, salt: float = 0.0) -> torch.Tensor:
    return (torch.arange(start, end, dtype=torch.float32) + salt).view(1, 1, -1, 1).expand(2, 1, -1, 1).clone()


def _shape(cache: PrefixCache) -> list:
    """The tree as nested (tokens, slots, last use) in child order, the free slots and the clock."""
    def walk(node):
        return [(child.tokens, child.slots.tolist(), child.used, walk(child)) for child in node.children.values()]
    return [walk(cache.root), list(cache.free), cache.clock]


def _fill(cache: PrefixCache, rng: random.Random, rounds: int) -> None:
    for _ in range(rounds):
        cache.tick()
        ids = [rng.randint(0, 3) for _ in range(rng.randint(1, 9))]
        if rng.random() < 0.5:
            cache.match(ids)
        else:
            salt = rng.random()
            cache.insert(ids, lambda a, b, s=salt: _kv(a, b, s))


def test_a_restored_prefix_cache_looks_up_and_evicts_as_the_original():
    rng = random.Random(3)
    original = PrefixCache(budget_tokens=24)
    _fill(original, rng, 60)  # splits and evictions included
    restored = PrefixCache(budget_tokens=24)
    restored.load_state_dict(original.state_dict())
    assert _shape(restored) == _shape(original)
    for cache in (original, restored):  # the same later work on both
        _fill(cache, random.Random(4), 80)
    assert _shape(restored) == _shape(original)
    for ids in ([0, 1, 2, 3], [1, 1], [3, 2, 1, 0, 0], [2]):
        (n, parts), (m, others) = original.match(ids), restored.match(ids)
        assert n == m and (n == 0 or torch.equal(original.gather(parts), restored.gather(others)))


@pytest.mark.parametrize("part", ["used", "free"])
def test_the_cache_check_can_fail(part):
    """A cache restored without its last uses evicts other leaves, one with its free slots in
    another order fills other slots: the comparison above sees either."""
    rng = random.Random(3)
    original = PrefixCache(budget_tokens=24)
    _fill(original, rng, 60)
    state = original.state_dict()
    state[part] = torch.zeros_like(state["used"]) if part == "used" else state["free"].flip(0)
    restored = PrefixCache(budget_tokens=24)
    restored.load_state_dict(state)
    for cache in (original, restored):
        cache.tick()
        cache.insert([3, 3, 3, 3, 3, 3, 3, 3], _kv)  # needs slots: takes free ones or evicts
    assert _shape(restored) != _shape(original)


def test_a_cache_state_of_another_budget_is_refused():
    cache = PrefixCache(budget_tokens=8)
    cache.insert([1, 2, 3], _kv)
    with pytest.raises(ValueError, match="8 tokens for a cache of 16"):
        PrefixCache(budget_tokens=16).load_state_dict(cache.state_dict())


def test_an_engine_restored_in_a_new_process_generates_what_the_original_does(tokenizer, prompts):  # noqa: F811
    model = random_model(tokenizer)
    first = engine(model, tokenizer, prefix_cache_tokens=512)
    first.generate(prompts[:20], seeded(20))
    state = first.engine.state_dict()
    assert state["fresh"] and first.engine.cache.tokens > 0
    second = engine(random_model(tokenizer), tokenizer, prefix_cache_tokens=512)  # the same weights, loaded anew
    second.engine.load_state_dict(state)
    later = prompts[10:30]
    a, b = first.generate(later, seeded(20)), second.generate(later, seeded(20))
    assert [g[0].token_ids for g in a] == [g[0].token_ids for g in b]
    assert [g[0].logprobs for g in a] == [g[0].logprobs for g in b]
    assert first.engine.stats == second.engine.stats  # the same prompts served from the cache


def test_an_engine_whose_weights_moved_since_its_cache_restores_an_empty_one(tokenizer, prompts):  # noqa: F811
    model = random_model(tokenizer)
    backend = engine(model, tokenizer, prefix_cache_tokens=512)
    backend.generate(prompts[:5], seeded(5))
    with torch.no_grad():
        next(model.parameters()).add_(0.01)  # an optimizer step after the rollout
    state = backend.engine.state_dict()
    assert not state["fresh"] and state["cache"] is None
    other = engine(random_model(tokenizer), tokenizer, prefix_cache_tokens=512)
    other.generate(prompts[:5], seeded(5))
    other.engine.load_state_dict(state)
    assert other.engine.cache.tokens == 0


@pytest.fixture
def index_dir(tmp_path):
    words = ["alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel"]
    frame = pd.DataFrame([{"id": str(i), "title": w.title(), "text": f"{w} facts and {w} stories"}
                          for i, w in enumerate(words)])
    build_index(frame, HashEncoder(), tmp_path / "index")
    return tmp_path / "index"


class CountingEncoder(HashEncoder):
    def __init__(self, salt: float = 0.0):
        self.calls, self.salt = 0, salt

    def encode_queries(self, texts):
        self.calls += 1
        out = self._encode(texts)
        return out + self.salt * np.arange(out.shape[1], dtype=np.float32)  # another batch, other last bits


def test_a_restored_retriever_memory_answers_as_the_original(index_dir):
    original = DenseRetriever.from_dir(index_dir, encoder=CountingEncoder())
    first = original.search(["alpha stories", "golf facts", "echo"], k=3)
    restored = DenseRetriever.from_dir(index_dir, encoder=CountingEncoder(salt=1.0))
    restored.load_memory_state(original.memory_state())
    assert restored.memory_state() == original.memory_state()  # least recently used first, as before
    again = ["echo", "alpha stories", "golf facts"]
    assert restored.search(again, k=3) == original.search(again, k=3) == [first[2], first[0], first[1]]
    assert restored.encoder.calls == 0  # from memory, not encoded again
    assert restored.memory_state() == original.memory_state()  # the same recency after the same use
    restored.forget()
    assert restored.search(["alpha stories"], k=3) != [first[0]] and restored.encoder.calls == 1


def test_a_run_state_with_other_engines_is_refused(tokenizer):  # noqa: F811
    policy = engine(random_model(tokenizer), tokenizer)
    teacher = engine(random_model(tokenizer), tokenizer)
    state = run_state.capture(object(), {"policy": policy, "teacher": teacher, "reference": teacher})
    assert sorted(state[run_state.ENGINES]) == ["policy", "teacher"]  # the reference is the Teacher
    with pytest.raises(InputError, match="engines"):
        run_state.restore(state, object(), {"policy": policy})


def test_threads_come_from_the_profile_unless_maopd_threads_asks():
    assert requested_threads(2, {"OMP_NUM_THREADS": "1"}) == 2
    assert requested_threads(2, {THREADS_ENV: "4"}) == 4
    for bad in ("0", "two", "-1"):
        with pytest.raises(ConfigError, match=THREADS_ENV):
            requested_threads(2, {THREADS_ENV: bad})


def test_use_threads_overrides_the_shell(monkeypatch):
    before = torch.get_num_threads()
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    try:
        assert use_threads(3) == 3 and torch.get_num_threads() == 3
        import os

        assert os.environ["OMP_NUM_THREADS"] == "3"
    finally:
        torch.set_num_threads(before)


def test_a_run_with_other_threads_is_another_draw(monkeypatch):
    assert threads_label(2, 2) == "2" and threads_label(4, 2) == "4 (profile: 2)"
    profile_threads = str(__import__("yaml").safe_load((REPO_ROOT / "params.yaml").read_text())["tiny"]["threads"])
    assert draw_tags(REPO_ROOT, "tiny")["draw.threads"] == profile_threads
    monkeypatch.setenv(THREADS_ENV, str(int(profile_threads) + 1))
    assert draw_tags(REPO_ROOT, "tiny")["draw.threads"] == f"{int(profile_threads) + 1} (profile: {profile_threads})"
    report = {"seed_set": "A", "precision": "bf16", "cpu": "Intel(R) Xeon(R) Processor, family 6 model 207 (AMX)"}
    assert default_name({**report, "threads": "2"}) == default_name(report)
    assert default_name({**report, "threads": "4 (profile: 2)"}) == default_name(report).replace("bf16", "bf16-t4")
