"""The validate_masks stage's checks on real workflow output: pass as produced, fail when corrupted."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.stages.validate_masks import audit_rollout
from pipeline.validate.masks import validate_masks
from tests.helpers.configs import workflow_cfg
from tests.helpers.fakes import FakeBackend, FakeRetriever, TeamScript, make_questions


@pytest.fixture(scope="module")
def audit_tables():
    backend = FakeBackend(TeamScript(n_searches=1, tasks_per_wave=2))
    cfg = workflow_cfg(n_candidates=2, leader_max_new_tokens=400, searcher_max_new_tokens=400,
                       answerer_max_new_tokens=200)
    samples, tokens = audit_rollout(backend, FakeRetriever(), pd.DataFrame(make_questions(2)), cfg,
                                    trajectories=2, seed=3)
    return backend, samples, tokens


def test_both_workflows_are_audited(audit_tables):
    _, samples, tokens = audit_tables
    assert set(samples["workflow"]) == {"cascade", "hierarchy"}
    assert {"observation", "generated"} <= set(tokens["source"])


def test_rollout_tables_pass_the_mask_suite(audit_tables, tmp_path):
    backend, samples, tokens = audit_tables
    outcome = validate_masks(samples, tokens, tmp_path / "docs", decode=backend.decode)
    assert outcome.success, outcome.failures


def test_a_trainable_observation_token_fails_the_suite(audit_tables, tmp_path):
    backend, samples, tokens = audit_tables
    corrupted = tokens.copy()
    victim = corrupted.index[corrupted["source"] == "observation"][0]
    corrupted.loc[victim, "loss_mask"] = 1
    outcome = validate_masks(samples, corrupted, tmp_path / "docs", decode=backend.decode)
    assert not outcome.success
    assert any(corrupted.loc[victim, "sample_id"] in f for f in outcome.failures)


def test_a_token_id_that_does_not_decode_back_fails(audit_tables, tmp_path):
    backend, samples, tokens = audit_tables
    corrupted = tokens.copy()
    victim = corrupted.index[corrupted["source"] == "generated"][0]
    corrupted.loc[victim, "token_id"] = corrupted.loc[victim, "token_id"] + 1
    outcome = validate_masks(samples, corrupted, tmp_path / "docs", decode=backend.decode)
    assert not outcome.success
