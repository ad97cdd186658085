"""The key CPU check of the paper profile's serving path: both team workflows run through
SGLangBackend -> HTTP -> fake SGLang server -> HFBackend give the same samples and tokens
tables as the same workflows run on the in-process HFBackend, for the same seed."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from pipeline.agents.records import to_tables
from pipeline.agents.workflows import run_workflow
from pipeline.basemodel.lm_training import supervised_finetune
from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.sglang_backend import SGLangBackend
from tests.helpers.configs import workflow_cfg
from tests.helpers.fake_sglang import FakeSGLangState, serve_state
from tests.helpers.fakes import FakeBackend, FakeRetriever, TeamScript

CFG = workflow_cfg(
    cascade_steps=5, hierarchy_steps=8, max_waves=2, max_parallel=2, max_searcher_turns=2, top_k=2,
    n_candidates=2, leader_max_new_tokens=32, searcher_max_new_tokens=16, answerer_max_new_tokens=8,
)
COUNTRIES = ["france", "italy", "spain", "peru", "chad", "oman", "iran", "laos", "cuba"]


def questions(names: list[str]) -> list[dict]:
    return [{"question_id": f"q-{c}", "question": f"capital of {c}?", "golden_answers": ["paris"],
             "dataset": "nq"} for c in names]


def scripted_examples() -> list[tuple[str, str]]:
    """(context, completion) pairs of a scripted team playing both workflows."""
    examples = []
    for workflow in ("cascade", "hierarchy"):
        fake = FakeBackend(TeamScript(n_searches=1, report="paris", tasks_per_wave=1, answer="paris"))
        run_workflow(workflow, questions(COUNTRIES[:6]), fake, FakeRetriever(), CFG, n_traj=1, seed=0)
        script = TeamScript(n_searches=1, report="paris", tasks_per_wave=1, answer="paris")
        examples += [(context, script(context)) for context in fake.contexts]
    return examples


@pytest.fixture(scope="module")
def backend() -> HFBackend:
    """A tiny Qwen3 briefly taught the action format, so rollouts search, dispatch, answer and
    also go wrong (the paths of a real rollout), while sampling still matters."""
    examples = scripted_examples()
    tokenizer = train_bpe_tokenizer([c + x for c, x in examples] * 3, vocab_size=500)
    model = build_tiny_qwen3(tokenizer, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
                             intermediate_size=96, max_position_embeddings=1024, seed=0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a 48-wide model: more threads only contend on a shared machine
    try:
        supervised_finetune(model, tokenizer, examples, steps=200, batch_size=8, lr=1e-2, seed=0)
    finally:
        torch.set_num_threads(threads)
    return HFBackend(model, tokenizer)


def rollout_tables(workflow: str, backend, seed: int) -> tuple[pd.DataFrame, pd.DataFrame, object]:
    rollout = run_workflow(workflow, questions(COUNTRIES[6:]), backend, FakeRetriever(), CFG, n_traj=2, seed=seed)
    samples, tokens = to_tables(rollout)
    return samples, tokens, rollout


@pytest.mark.parametrize("workflow", ["cascade", "hierarchy"])
def test_workflow_over_sglang_equals_in_process(workflow, backend):
    samples, tokens, rollout = rollout_tables(workflow, backend, seed=5)
    # what this comparison covers: several ticks, retrieval, and both good and bad actions
    assert rollout.ticks >= 3 and rollout.search_calls >= 1
    assert samples["malformed"].any() and not samples["malformed"].all()
    if workflow == "hierarchy":
        assert (samples["action"] == "dispatch").any()

    state = FakeSGLangState(backend)
    with serve_state(state) as url:
        remote = SGLangBackend(url, tokenizer=backend.tokenizer, send_seed=True)
        remote_samples, remote_tokens, remote_rollout = rollout_tables(workflow, remote, seed=5)
    pd.testing.assert_frame_equal(remote_samples, samples)
    pd.testing.assert_frame_equal(remote_tokens, tokens)
    assert remote_rollout.ticks == rollout.ticks
    generate_calls = [body for path, body in state.requests if path == "/generate"]
    assert len(generate_calls) == rollout.generate_calls  # one HTTP request per tick


def test_the_seed_alone_decides_the_remote_rollout(backend):
    with serve_state(FakeSGLangState(backend)) as url:
        remote = SGLangBackend(url, tokenizer=backend.tokenizer, send_seed=True)
        first, _, _ = rollout_tables("cascade", remote, seed=6)
        again, _, _ = rollout_tables("cascade", remote, seed=6)
        other, _, _ = rollout_tables("cascade", remote, seed=7)
    pd.testing.assert_frame_equal(again, first)
    assert other["response_text"].tolist() != first["response_text"].tolist()
