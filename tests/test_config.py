"""params.yaml is loaded into typed objects; bad values fail before any work, naming the key."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from pipeline.config import PROFILES, load_params
from pipeline.errors import ConfigError, InputError

from .conftest import REPO_ROOT


def _write(tmp_path: Path, mutate) -> Path:
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    mutate(raw)
    out = tmp_path / "params.yaml"
    out.write_text(yaml.safe_dump(raw))
    return out


@pytest.mark.parametrize("profile", PROFILES)
def test_every_profile_of_the_committed_params_loads(profile):
    params = load_params(REPO_ROOT / "params.yaml", profile=profile)
    assert params.profile == profile
    assert params.common.protocol.top_k == 3
    assert sum(params.data.test_quotas.values()) > 0


PAPER_TEST_QUOTAS = {"nq": 812, "triviaqa": 812, "popqa": 812, "hotpotqa": 813, "2wiki": 813, "musique": 813,
                     "bamboogle": 125}


@pytest.mark.parametrize("profile", ["paper", "tiny"])
def test_paper_and_tiny_profiles_draw_the_papers_test_set(profile):
    params = load_params(REPO_ROOT / "params.yaml", profile=profile)
    assert params.data.test_quotas == PAPER_TEST_QUOTAS
    assert sum(params.data.test_quotas.values()) == 5000
    assert params.data.seed == 20260728
    assert params.common.eval.runs == 4


def test_tiny_world_pools_leave_room_for_dedup():
    params = load_params(REPO_ROOT / "params.yaml", profile="tiny")
    pools = params.data.world["test_questions"]
    for dataset, quota in params.data.test_quotas.items():
        assert pools[dataset] >= quota * 1.04, dataset


def test_paper_profile_keeps_the_paper_numbers():
    params = load_params(REPO_ROOT / "params.yaml", profile="paper")
    assert params.data.seed == 20260728
    assert params.common.eval.bootstrap_seed == 20260912


def test_with_eval_sampling_changes_a_copy_only():
    from pipeline.config import with_eval_sampling

    params = load_params(REPO_ROOT / "params.yaml", profile="tiny")
    other = with_eval_sampling(params, temperature=1.0, seed=5)
    assert (other.eval.rollout.temperature, other.eval.seed) == (1.0, 5)
    assert (params.eval.rollout.temperature, params.eval.seed) == (0.7, 20261129)
    assert other.eval.rollout.max_searcher_turns == params.eval.rollout.max_searcher_turns
    assert other.train == params.train and other.base_model == params.base_model
    assert with_eval_sampling(params).eval == params.eval
    with pytest.raises(ConfigError, match="temperature"):
        with_eval_sampling(params, temperature=-0.5)


def test_with_behaviour_questions_changes_a_copy_only():
    from pipeline.config import with_behaviour_questions

    params = load_params(REPO_ROOT / "params.yaml", profile="tiny")
    other = with_behaviour_questions(params, 1024)
    assert other.base_model.behaviour_questions == 1024
    assert params.base_model.behaviour_questions == 256
    assert other.base_model.sft == params.base_model.sft and other.eval == params.eval


def test_unknown_key_is_named(tmp_path):
    path = _write(tmp_path, lambda r: r["tiny"]["data"].update(dev_sise=3))
    with pytest.raises(ConfigError, match=r"tiny\.data\.dev_sise: unknown key"):
        load_params(path)


def test_wrong_type_is_named(tmp_path):
    path = _write(tmp_path, lambda r: r["common"]["protocol"].update(top_k="three"))
    with pytest.raises(ConfigError, match=r"common\.protocol\.top_k"):
        load_params(path)


def test_zero_k_is_impossible(tmp_path):
    path = _write(tmp_path, lambda r: r["common"]["protocol"].update(top_k=0))
    with pytest.raises(ConfigError, match=r"common\.protocol\.top_k: .*greater than 0"):
        load_params(path)


def test_negative_quota_is_named(tmp_path):
    path = _write(tmp_path, lambda r: r["paper"]["data"]["test_quotas"].update(nq=-5))
    with pytest.raises(ConfigError, match=r"paper\.data\.test_quotas.*nq"):
        load_params(path, profile="tiny")  # an inactive profile is validated too


def test_unknown_profile(tmp_path):
    path = _write(tmp_path, lambda r: r.update(profile="huge"))
    with pytest.raises(ConfigError, match="profile"):
        load_params(path)


def test_the_searchers_own_outcome_is_for_the_stage1_reward_only():
    from pipeline.config import load_params
    from pipeline.rl.train_params import train_config

    params = load_params(REPO_ROOT / "params.yaml", profile="ci")
    assert train_config(params, "c_mas_rl").searcher_outcome == "team"
    own = params.train.systems.multiagent_opd.model_copy(update={"searcher_outcome": "report"})
    systems = params.train.systems.model_copy(update={"multiagent_opd": own})
    active = params.active.model_copy(update={"train": params.train.model_copy(update={"systems": systems})})
    with pytest.raises(InputError, match="ci.train.systems.multiagent_opd.searcher_outcome"):
        train_config(params.model_copy(update={"active": active}), "multiagent_opd")
    wider = params.train.systems.c_mas_rl.model_copy(update={"questions_per_batch": 9})
    systems = params.train.systems.model_copy(update={"c_mas_rl": wider})
    active = params.active.model_copy(update={"train": params.train.model_copy(update={"systems": systems})})
    cfg = train_config(params.model_copy(update={"active": active}), "c_mas_rl")
    assert cfg.questions_per_batch == 9 and train_config(params, "multiagent_opd").questions_per_batch == 2
