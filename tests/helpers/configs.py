"""Configs for tests, with the paper's protocol and constants read from params.yaml (as the
stages read them), and the sampling sizes a test chooses."""

from __future__ import annotations

from dataclasses import replace

from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.config import load_params
from tests.conftest import REPO_ROOT

PARAMS = load_params(REPO_ROOT / "params.yaml", profile="ci")
REWARDS = PARAMS.common.rewards
OPD_BETA = PARAMS.train.shared.opd_beta
TIE_ON = PARAMS.train.shared.tie_on
OPTIM = PARAMS.common.optim
_PROTOCOL = PARAMS.common.protocol

# Sampling sizes for tests: long enough for every scripted action of the fakes.
_TEST_SAMPLING = dict(max_searcher_turns=5, leader_max_new_tokens=96, searcher_max_new_tokens=64,
                      answerer_max_new_tokens=32, temperature=1.0, top_p=1.0)


def workflow_cfg(**overrides) -> WorkflowConfig:
    """common.protocol's budgets (train_candidates Answerer candidates) with the test sampling sizes,
    then `overrides`."""
    base = WorkflowConfig(
        cascade_steps=_PROTOCOL.cascade_steps, hierarchy_steps=_PROTOCOL.hierarchy_steps,
        max_waves=_PROTOCOL.max_waves, max_parallel=_PROTOCOL.max_parallel, top_k=_PROTOCOL.top_k,
        n_candidates=_PROTOCOL.train_candidates, **_TEST_SAMPLING,
    )
    return replace(base, **overrides)

EVAL = PARAMS.common.eval
# keyword arguments of the evaluation maths, as the report stage passes them
RUNS = dict(runs=EVAL.runs)
BOOTSTRAP = dict(draws=EVAL.bootstrap_draws, seed=EVAL.bootstrap_seed, level=EVAL.confidence)
