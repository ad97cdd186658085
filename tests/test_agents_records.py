"""Samples, tokens and trajectory tables of a rollout (docs/contracts.md)."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest

from pipeline.agents.records import TRAJECTORY_COLUMNS, to_tables, trajectory_table
from pipeline.agents.workflows import run_cascade, run_hierarchy
from pipeline.io import write_parquet
from tests.helpers.configs import workflow_cfg
from tests.helpers.fakes import FakeBackend, FakeRetriever, TeamScript, fake_logprob, make_questions

CONTRACT_SAMPLE_COLUMNS = [
    "sample_id", "question_id", "trajectory_id", "workflow", "role", "call_id", "agent_id",
    "request_id", "candidate_id", "step", "wave", "prompt_ids", "prompt_text", "response_text",
    "action", "malformed", "malformation", "n_search", "reported", "answer", "golden_answers",
    "c_tool", "forced_answer", "is_final_request",
]
CONTRACT_TOKEN_COLUMNS = [
    "sample_id", "pos", "token_id", "role", "source", "loss_mask", "old_logp", "teacher_logp", "advantage",
]
REPORT = "zebra report"
CFG = workflow_cfg(leader_max_new_tokens=400, searcher_max_new_tokens=300, answerer_max_new_tokens=100)


def _rollout(workflow: str, n_candidates: int = 5):
    backend = FakeBackend(TeamScript(n_searches=2, n_waves=2, report=REPORT))
    run = run_cascade if workflow == "cascade" else run_hierarchy
    cfg = workflow_cfg(**{**CFG.__dict__, "n_candidates": n_candidates})
    return run(make_questions(2), backend, FakeRetriever(), cfg, n_traj=3, seed=0), backend


@pytest.fixture(scope="module", params=["cascade", "hierarchy"])
def tables(request):
    rollout, backend = _rollout(request.param)
    samples, tokens = to_tables(rollout)
    return rollout, backend, samples, tokens


def test_columns_follow_the_contract(tables):
    _, _, samples, tokens = tables
    assert set(CONTRACT_SAMPLE_COLUMNS) <= set(samples.columns)
    assert list(tokens.columns) == CONTRACT_TOKEN_COLUMNS
    assert tokens["loss_mask"].dtype == np.int64 and tokens["old_logp"].dtype == np.float64


def test_ids_are_unique_and_well_formed(tables):
    rollout, _, samples, _ = tables
    assert samples["sample_id"].is_unique
    for row in samples.itertuples():
        assert re.fullmatch(rf"{re.escape(row.question_id)}/t[0-2]", row.trajectory_id)
        base = f"{row.trajectory_id}/c{row.call_id}"
        if row.role == "answerer":
            assert row.sample_id == f"{base}/k{row.candidate_id}"
            assert row.request_id == f"{row.trajectory_id}/a0" and 0 <= row.candidate_id < 5
        else:
            assert row.sample_id == base and row.request_id == "" and row.candidate_id == -1
        if row.workflow == "cascade":
            assert row.wave == -1 and row.agent_id in ("searcher-0-0", "answerer")
        else:
            assert re.fullmatch(r"leader|answerer|searcher-\d+-\d+", row.agent_id)
    # call ids: consecutive per trajectory, shared only by the candidates of one request
    for _, group in samples.groupby("trajectory_id"):
        per_call = group.groupby("call_id")["role"].agg(["first", "size"])
        assert list(per_call.index) == list(range(len(per_call)))
        assert all((size == 5) == (role == "answerer") for role, size in per_call.itertuples(index=False))
    assert samples["trajectory_id"].nunique() == len(rollout.trajectories) == 6


def test_prompt_and_response_texts_match_the_ids(tables):
    _, backend, samples, tokens = tables
    by_sample = dict(tuple(tokens.groupby("sample_id", sort=False)))
    for row in samples.itertuples():
        assert row.prompt_ids[0] == 0  # encode_prompt's BOS: prompts were encoded once, as prompts
        assert row.prompt_text == backend.decode(row.prompt_ids)
        toks = by_sample[row.sample_id]
        assert list(toks["pos"]) == list(range(len(toks)))
        assert backend.decode(toks["token_id"].tolist()) == row.response_text


def test_token_ids_and_logprobs_are_the_generated_ones(tables):
    rollout, backend, _, tokens = tables
    by_sample = dict(tuple(tokens.groupby("sample_id", sort=False)))
    for call in rollout.calls:
        toks = by_sample[call.sample_id]
        assert toks["token_id"].tolist() == call.response_ids
        start = 0
        for seg in call.segments:
            part = toks.iloc[start : start + len(seg.token_ids)]
            start += len(seg.token_ids)
            assert set(part["source"]) == {seg.source}
            if seg.source == "generated":
                # the fake gives log-probs by position inside the generated turn
                assert part["old_logp"].tolist() == [fake_logprob(t, p) for p, t in enumerate(seg.token_ids)]
            else:
                assert (part["old_logp"] == 0.0).all()
                assert seg.token_ids == backend.encode(seg.text)
    assert tokens["teacher_logp"].isna().all() and (tokens["advantage"] == 0.0).all()


def test_loss_mask_is_one_only_on_generated_tokens(tables):
    _, _, _, tokens = tables
    generated = tokens["source"] == "generated"
    assert (tokens.loc[generated, "loss_mask"] == 1).all()
    assert (tokens.loc[~generated, "loss_mask"] == 0).all()
    assert (tokens["source"] == "observation").any() and set(tokens["role"]) >= {"searcher", "answerer"}


@pytest.mark.parametrize("trained", [("leader", "answerer"), ("searcher",), ()])
def test_loss_mask_follows_trained_roles(trained):
    rollout, _ = _rollout("hierarchy")
    _, tokens = to_tables(rollout, trained_roles=trained)
    expected = (tokens["source"] == "generated") & tokens["role"].isin(list(trained))
    assert (tokens["loss_mask"] == expected.astype(int)).all()
    assert tokens["loss_mask"].sum() == expected.sum()


def test_unknown_trained_role_raises():
    rollout, _ = _rollout("cascade")
    with pytest.raises(ValueError, match="critic"):
        to_tables(rollout, trained_roles=("critic",))


def test_reports_are_generated_only_in_searcher_samples(tables):
    _, _, samples, tokens = tables
    searchers = samples[samples["role"] == "searcher"]
    others = samples[samples["role"] != "searcher"]
    assert searchers["response_text"].str.contains(REPORT).all()
    assert (searchers["report"] == REPORT).all() and searchers["reported"].all()
    assert not others["response_text"].str.contains(REPORT).any()
    answerer_prompts = samples.loc[samples["role"] == "answerer", "prompt_text"]
    assert answerer_prompts.str.contains(REPORT).all()
    obs_text = tokens[tokens["source"] == "observation"]
    assert set(obs_text["role"]) == {"searcher"}


def test_trajectory_level_columns_agree_with_the_trajectory_table(tables):
    rollout, _, samples, _ = tables
    traj = trajectory_table(rollout)
    assert list(traj.columns) == TRAJECTORY_COLUMNS and len(traj) == 6
    merged = samples.merge(traj, on="trajectory_id", suffixes=("", "_t"))
    assert (merged["c_tool"] == merged["c_tool_t"]).all()
    assert (merged["forced_answer"] == merged["forced_answer_t"]).all()
    counts = samples.groupby("trajectory_id").agg(n=("sample_id", "size"), inp=("input_tokens", "sum"),
                                                  search=("n_search", "sum"))
    traj = traj.set_index("trajectory_id")
    assert (traj["n_calls"] == counts["n"]).all() and (traj["input_tokens"] == counts["inp"]).all()
    assert (traj["search_actions"] == counts["search"]).all() and (traj["search_actions"] > 0).all()
    assert traj["has_final_answer"].all() and (traj["final_answer"] == "paris").all()
    assert (traj["last_answerer_output"] == "<answer>paris</answer>").all()
    assert all(samples.loc[samples.role == "answerer", "golden_answers"]
               .map(lambda g: list(g) == ["paris", "Paris City"]))


def test_tables_round_trip_through_parquet(tables, tmp_path):
    _, _, samples, tokens = tables
    write_parquet(tmp_path / "samples.parquet", samples)
    write_parquet(tmp_path / "tokens.parquet", tokens)
    back = pd.read_parquet(tmp_path / "samples.parquet")
    assert [list(x) for x in back["prompt_ids"]] == [list(x) for x in samples["prompt_ids"]]
    assert len(pd.read_parquet(tmp_path / "tokens.parquet")) == len(tokens)


def test_evaluation_rollout_has_one_candidate_and_empty_rollout_has_columns():
    rollout, _ = _rollout("hierarchy", n_candidates=1)
    samples, _ = to_tables(rollout)
    assert (samples.loc[samples.role == "answerer", "candidate_id"] == 0).all()
    assert (samples.role == "answerer").sum() == len(rollout.trajectories)
    empty = run_cascade([], FakeBackend(TeamScript()), FakeRetriever(), CFG, n_traj=1, seed=0)
    s, t = to_tables(empty)
    assert len(s) == len(t) == 0 and set(CONTRACT_SAMPLE_COLUMNS) <= set(s.columns)
    assert list(trajectory_table(empty).columns) == TRAJECTORY_COLUMNS
