"""The verl stage configs (configs/verl/), the launch command and the verl dataset files, on CPU.

Each stage config is composed over verl's own `ppo_trainer` defaults in struct mode (a wrong key
fails), composes identically through Hydra (what `verl.trainer.main_ppo` does), passes verl's
`validate_config` and builds verl's config dataclasses, and carries the paper profile's numbers
from params.yaml. Nothing here starts Ray or needs a GPU; the command itself never ran here.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pandas as pd
import pytest
from omegaconf import OmegaConf
from verl.trainer.ppo.utils import need_critic, need_reference_policy
from verl.utils.config import omega_conf_to_dataclass, validate_config

from pipeline.cli import main
from pipeline.config import load_params
from pipeline.errors import InputError
from pipeline.io import write_parquet
from pipeline.rl.train_params import train_config
from pipeline.systems import TRAINED
from pipeline.verl_agent.agent_file import read_entry, stage_train_config
from pipeline.verl_agent.agent_run import question_row
from pipeline.verl_agent.datasets import verl_rows
from pipeline.verl_agent.hydra_configs import CONFIG_DIR, compose_stage, hydra_compose
from pipeline.verl_agent.launch import PLUGIN, build_launch, export_command, mismatches, prepare

KEYS = sorted(s.name for s in TRAINED)
URLS = dict(retriever_url="http://r:8000/retrieve", teacher_url="http://t:30001", judge_url="http://j:30002")


@pytest.fixture(scope="module")
def paper(repo_root):
    return load_params(repo_root / "params.yaml", profile="paper")


@pytest.fixture
def config_copy(tmp_path) -> Path:
    folder = tmp_path / "verl"
    shutil.copytree(CONFIG_DIR, folder)
    return folder


def _edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text
    path.write_text(text.replace(old, new))


@pytest.mark.parametrize("key", KEYS)
def test_stage_config_has_the_paper_numbers(paper, key):
    cfg = compose_stage(key)
    tc = train_config(paper, key)
    assert mismatches(cfg, tc) == []
    # the paper's numbers, spelled out (docs/method.md §6): 32 questions, 5 trajectories, lr 1e-6
    assert (cfg.data.train_batch_size, cfg.actor_rollout_ref.rollout.n) == (32, 5)
    assert cfg.actor_rollout_ref.actor.optim.lr == 1e-6 and cfg.actor_rollout_ref.actor.clip_ratio_c == 3.0
    assert cfg.actor_rollout_ref.actor.policy_loss.loss_mode == "vanilla"
    assert cfg.actor_rollout_ref.actor.loss_agg_mode == "token-mean"
    # numbers our code applies inside verl, from params.yaml: 5 minibatch updates, KL 1e-3
    assert (tc.optim.n_minibatches, tc.rewards.kl_coef, tc.opd_beta, tc.tie_on) == (5, 1e-3, 0.01, "reward")
    assert cfg.algorithm.adv_estimator == "multiagent_opd" and not cfg.algorithm.use_kl_in_reward
    assert not cfg.actor_rollout_ref.actor.use_kl_loss
    assert cfg.algorithm.rollout_correction.bypass_mode  # pi_old = the sampling log-probs
    assert cfg.trainer.use_v1 and cfg.trainer.v1.trainer_mode == "maopd_sync"
    rollout = cfg.actor_rollout_ref.rollout
    assert rollout.name == "sglang" and rollout.calculate_log_probs and not rollout.skip_tokenizer_init
    assert rollout.agent.default_agent_loop == f"maopd_{key}" and cfg.trainer.experiment_name == key


@pytest.mark.parametrize("key", KEYS)
def test_hydra_composes_the_same_config(key):
    assert OmegaConf.to_container(hydra_compose(key)) == OmegaConf.to_container(compose_stage(key))


@pytest.mark.parametrize("key", ["c_mas_rl", "multiagent_opd"])
def test_verl_validates_the_config_and_builds_its_dataclasses(key):
    cfg = compose_stage(key)
    validate_config(cfg, use_reference_policy=need_reference_policy(cfg), use_critic=need_critic(cfg))
    assert not need_reference_policy(cfg) and not need_critic(cfg)
    algo = omega_conf_to_dataclass(cfg.algorithm)
    actor = omega_conf_to_dataclass(cfg.actor_rollout_ref.actor)
    rollout = omega_conf_to_dataclass(cfg.actor_rollout_ref.rollout)
    assert (algo.adv_estimator, actor.optim.lr, rollout.n, rollout.prompt_length) == ("multiagent_opd", 1e-6, 5, 6144)


def test_a_wrong_key_fails_in_a_shared_file(config_copy):
    _edit(config_copy / "maopd_base.yaml", "      lr: 1.0e-06", "      learning_rate: 1.0e-06")
    with pytest.raises(InputError, match=r"maopd_base.yaml: actor_rollout_ref.actor.optim.learning_rate"):
        compose_stage("multiagent_opd", config_dir=config_copy)


def test_a_wrong_key_fails_in_a_stage_file_and_in_overrides(config_copy):
    _edit(config_copy / "multiagent_opd.yaml", "  experiment_name: multiagent_opd", "  experiment: multiagent_opd")
    with pytest.raises(InputError, match=r"multiagent_opd.yaml: trainer.experiment"):
        compose_stage("multiagent_opd", config_dir=config_copy)
    with pytest.raises(InputError, match="overrides: trainer.bogus"):
        compose_stage("c_mas_rl", ["trainer.bogus=1"])


def test_a_number_that_disagrees_with_params_is_reported(config_copy, paper):
    _edit(config_copy / "maopd_base.yaml", "  train_batch_size: 32", "  train_batch_size: 64")
    wrong = mismatches(compose_stage("multiagent_opd", config_dir=config_copy), train_config(paper, "multiagent_opd"))
    assert wrong == ["data.train_batch_size: 64 != 32"]


def test_unknown_stage_and_bad_defaults(config_copy):
    with pytest.raises(InputError, match="expected a trained system"):
        compose_stage("stage3")
    _edit(config_copy / "multiagent_opd.yaml", "  - ppo_trainer\n", "")
    with pytest.raises(InputError, match="defaults must start with ppo_trainer"):
        compose_stage("multiagent_opd", config_dir=config_copy)


# --------------------------------------------------------------------------- launch


@pytest.mark.parametrize("key", KEYS)
def test_launch_builds_the_main_ppo_command(paper, tmp_path, key):
    launch = build_launch(paper, tmp_path, key, n_gpus=4, **URLS)
    argv = launch.argv
    assert argv[1:3] == ["-m", "verl.trainer.main_ppo"] and f"--config-name={key}" in argv
    assert f"--config-path={CONFIG_DIR}" in argv
    assert "trainer.n_gpus_per_node=4" in argv and f"data.train_files={tmp_path / 'data/verl/train.parquet'}" in argv
    assert launch.env["VERL_USE_EXTERNAL_MODULES"] == PLUGIN
    assert launch.entry["system"] == key and launch.entry["name"] == f"maopd_{key}"
    assert "verl.trainer.main_ppo" in launch.shell()


def test_launch_refuses_missing_services_and_other_profiles(paper, repo_root, tmp_path):
    with pytest.raises(InputError, match="teacher_url"):
        build_launch(paper, tmp_path, "multiagent_opd", retriever_url="http://r")
    with pytest.raises(InputError, match="teacher_url"):  # the Prompted Critic keeps OPD's KL-to-Teacher term
        build_launch(paper, tmp_path, "prompted_critic", retriever_url="http://r")
    with pytest.raises(InputError, match="judge_url"):
        build_launch(paper, tmp_path, "prompted_critic", retriever_url="http://r", teacher_url="http://t")
    build_launch(paper, tmp_path, "c_mas_rl", retriever_url="http://r")  # Stage I has no Teacher yet
    tiny = load_params(repo_root / "params.yaml", profile="tiny")
    with pytest.raises(InputError, match="tiny.train.shared.tie_on is 'outcome'"):  # verl ties on rewards only
        build_launch(tiny, tmp_path, "multiagent_opd", **URLS)
    shared = tiny.train.shared.model_copy(update={"tie_on": "reward"})
    active = tiny.active.model_copy(update={"train": tiny.train.model_copy(update={"shared": shared})})
    tiny_on_rewards = tiny.model_copy(update={"active": active})
    with pytest.raises(InputError, match="disagrees with params.yaml"):
        build_launch(tiny_on_rewards, tmp_path, "multiagent_opd", **URLS)


def _splits(root: Path) -> None:
    for split, n in (("train", 3), ("dev", 4)):
        write_parquet(root / "data" / "splits" / f"{split}.parquet", pd.DataFrame({
            "id": [f"{split}{i}" for i in range(n)], "question": [f"q {i}?" for i in range(n)],
            "golden_answers": [["a", "b"]] * n, "dataset": ["nq"] * n, "split": split}))


def test_prepare_writes_what_verl_and_our_trainer_read(paper, tmp_path, monkeypatch):
    import datasets

    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path / "hf_cache"))
    _splits(tmp_path)
    launch = build_launch(paper, tmp_path, "multiagent_opd", **URLS)
    files = prepare(launch, paper)
    assert set(files) == {"train", "dev", "agent_loop"} and all(p.is_file() for p in files.values())
    # our trainer finds the stage's params.yaml numbers through verl's own config
    cfg = compose_stage("multiagent_opd", [a for a in launch.argv if "=" in a and not a.startswith("--")])
    assert read_entry(cfg)["teacher_url"] == URLS["teacher_url"]
    tc = stage_train_config(cfg)
    assert (tc.system, tc.optim.n_minibatches) == ("multiagent_opd", 5)
    # verl's RLHFDataset reads our rows, and the agent loop gets its question back
    from verl.utils.dataset.rl_dataset import RLHFDataset

    from tests.test_rl_trainer import tiny_tokenizer

    ds = RLHFDataset(data_files=[str(files["dev"])], tokenizer=tiny_tokenizer(), config=cfg.data, processor=None)
    assert len(ds) == min(4, paper.train.shared.dev_questions)
    row = ds[2]
    assert row["extra_info"]["split"] == "dev" and row["raw_prompt"][0]["content"] == "q 2?"
    assert question_row(row["extra_info"]) == {"question_id": "dev2", "question": "q 2?", "golden_answers": ["a", "b"],
                                               "dataset": "nq"}


def test_verl_rows_check_their_input():
    with pytest.raises(InputError, match="golden_answers"):
        verl_rows(pd.DataFrame({"id": ["a"], "question": ["q?"], "golden_answers": ["a"]}), "train")
    with pytest.raises(InputError, match="split"):
        verl_rows(pd.DataFrame({"id": ["a"], "question": ["q?"], "golden_answers": [["a"]]}), "test")


def test_export_command_merges_the_checkpoint_into_the_models_folder(tmp_path):
    argv = export_command(tmp_path, "c_mas_rl", 500)
    assert argv[1:4] == ["-m", "verl.model_merger", "merge"]
    assert argv[argv.index("--local_dir") + 1].endswith("checkpoints/verl/c_mas_rl/global_step_500/actor")
    assert argv[argv.index("--target_dir") + 1] == str(tmp_path.resolve() / "data" / "models" / "c_mas_rl")


def test_cli_prints_the_command_and_fails_on_the_tiny_profile(repo_root, capsys):
    params = str(repo_root / "params.yaml")
    assert main(["--params", params, "--profile", "paper", "train-verl", "multiagent_opd", "--teacher-url", "http://t",
                 "-o", "trainer.val_before_train=false"]) == 0
    out = capsys.readouterr().out
    assert ("verl.trainer.main_ppo" in out and "--config-name=multiagent_opd" in out
            and "trainer.val_before_train=false" in out)
    assert main(["--params", params, "--profile", "tiny", "train-verl", "multiagent_opd",
                 "--teacher-url", "http://t"]) == 2
    assert "tie_on is 'outcome'" in capsys.readouterr().err  # the first refusal: verl ties on rewards only


def test_plugin_registers_our_pieces_inside_verl(repo_root, tmp_path):
    code = ("import verl\n"
            "from verl.trainer.ppo.core_algos import get_adv_estimator_fn\n"
            "from verl.experimental.agent_loop.agent_loop import _agent_loop_registry\n"
            "print(get_adv_estimator_fn('multiagent_opd').__name__, _agent_loop_registry['multiagent_opd_team'])\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=repo_root, timeout=300,
                         env={"VERL_USE_EXTERNAL_MODULES": PLUGIN, "PYTHONPATH": str(repo_root),
                              "PATH": "/usr/bin:/bin", "HOME": str(tmp_path)})
    assert out.returncode == 0, out.stderr[-2000:]
    assert "compute_multiagent_opd_advantage {'_target_': 'pipeline.verl_agent.loop.TeamAgentLoop'}" in out.stdout


def test_a_group_filter_is_reported_as_unsupported_by_verl(paper):
    cfg = replace(train_config(paper, "c_mas_rl"), oversample=4)
    assert mismatches(compose_stage("c_mas_rl"), cfg) == [
        "train.systems oversample: the verl path has no group filter, expected 1, got 4"]
