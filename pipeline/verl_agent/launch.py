"""The verl command line of one training stage of the paper profile (it runs on GPU workers only).

`build_launch` checks everything it can without a GPU: the stage config composes over verl's
defaults with every key known (struct mode), its numbers equal the active profile's params.yaml
(so a tiny-profile launch fails here, not after a cluster start), and the services the system
needs have URLs. `prepare` writes the files the command reads: data/verl/{train,dev}.parquet
and data/verl/<system>/agent_loop.yaml. `export_command` turns a verl checkpoint into the HF folder
the next stage or the evaluation reads (verl.model_merger).
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from omegaconf import DictConfig, ListConfig, OmegaConf

from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.paths import model_dir
from pipeline.rl.batch_rewards import require_scorers
from pipeline.rl.train_params import KEEP_CHECKPOINTS, TrainConfig, train_config
from pipeline.systems import trained_system
from pipeline.verl_agent.agent_file import agent_loop_entry, entry_name, write_agent_loop_file
from pipeline.verl_agent.datasets import verl_data_dir, write_verl_datasets
from pipeline.verl_agent.hydra_configs import CONFIG_DIR, compose_stage

PLUGIN = "pipeline.verl_agent.plugin"


def expected_values(cfg: TrainConfig) -> dict[str, Any]:
    """verl config key -> the value params.yaml gives it (the one source of truth)."""
    actor, rollout = "actor_rollout_ref.actor", "actor_rollout_ref.rollout"
    return {
        "data.train_batch_size": cfg.questions_per_batch,
        f"{rollout}.n": cfg.trajectories_per_question,
        f"{actor}.optim.lr": cfg.lr,
        f"{actor}.optim.betas": list(cfg.optim.adam_betas),
        f"{actor}.optim.weight_decay": cfg.optim.weight_decay,
        f"{actor}.optim.clip_grad": cfg.optim.grad_clip,
        f"{actor}.clip_ratio": cfg.optim.clip_ratio,
        f"{actor}.clip_ratio_low": cfg.optim.clip_ratio,
        f"{actor}.clip_ratio_high": cfg.optim.clip_ratio,
        f"{actor}.clip_ratio_c": cfg.optim.clip_ratio_c,
        f"{actor}.entropy_coeff": cfg.entropy_coef,
        f"{rollout}.temperature": cfg.rollout.temperature,
        f"{rollout}.top_p": cfg.rollout.top_p,
        f"{rollout}.val_kwargs.temperature": cfg.dev_rollout.temperature,
        f"{rollout}.val_kwargs.top_p": cfg.dev_rollout.top_p,
        "data.seed": cfg.seed,
        "trainer.total_training_steps": cfg.steps,
        "trainer.save_freq": cfg.checkpoint_every,
        "trainer.test_freq": cfg.eval_every,
        "trainer.max_actor_ckpt_to_keep": KEEP_CHECKPOINTS,
    }


def _select(cfg: DictConfig, dotted: str) -> Any:
    node = OmegaConf.select(cfg, dotted, throw_on_missing=True)
    return OmegaConf.to_container(node) if isinstance(node, (DictConfig, ListConfig)) else node


def mismatches(verl_cfg: DictConfig, cfg: TrainConfig) -> list[str]:
    """'key: verl value != params value' for every number the two disagree on."""
    out = []
    if cfg.oversample != 1:
        out.append(f"train.systems oversample: the verl path has no group filter, expected 1, got {cfg.oversample}")
    for key, want in expected_values(cfg).items():
        got = _select(verl_cfg, key)
        if got != want:
            out.append(f"{key}: {got!r} != {want!r}")
    return out


@dataclass
class VerlLaunch:
    key: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path
    files: dict[str, Path] = field(default_factory=dict)  # what `prepare` writes
    entry: dict[str, Any] = field(default_factory=dict)

    def shell(self) -> str:
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in self.env.items())
        return f"cd {shlex.quote(str(self.cwd))} && {env} " + " ".join(shlex.quote(a) for a in self.argv)


def base_model_path(params: Params, root: Path) -> Path:
    """The student's start: data/models/base (resolved through its model_ref.json) once the
    base_model stage ran, else the configured local folder."""
    from pipeline.policy.model_ref import resolve_model_dir

    try:
        return resolve_model_dir(model_dir(root, "base")).resolve()
    except InputError:
        return (root / params.base_model.path).resolve()


def build_launch(
    params: Params,
    root: Path,
    key: str,
    *,
    retriever_url: str,
    teacher_url: str | None = None,
    judge_url: str | None = None,
    n_gpus: int = 8,
    nnodes: int = 1,
    send_seed: bool = False,
    overrides: Sequence[str] = (),
    python: str = sys.executable,
) -> VerlLaunch:
    """The command that trains system `key` (`train.systems.<key>`) with verl (see the module doc)."""
    system = trained_system(key)
    require_scorers(system, teacher_url or None, judge_url or None, "SGLang server URL (teacher_url / judge_url)",
                    allow_unused=True)
    if n_gpus < 1 or nnodes < 1:
        raise InputError(f"n_gpus, nnodes: expected >= 1, got {n_gpus}, {nnodes}")
    root = Path(root).resolve()
    data = verl_data_dir(root)
    files = {"train": data / "train.parquet", "dev": data / "dev.parquet", "agent_loop": data / key / "agent_loop.yaml"}
    weights = system.weights
    stage_overrides = [
        f"data.train_files={files['train']}",
        f"data.val_files={files['dev']}",
        f"actor_rollout_ref.model.path={base_model_path(params, root)}",
        f"actor_rollout_ref.rollout.agent.agent_loop_config_path={files['agent_loop']}",
        f"actor_rollout_ref.rollout.agent.default_agent_loop={entry_name(key)}",
        f"trainer.default_local_dir={root / 'data' / 'checkpoints' / 'verl' / weights}",
        f"trainer.n_gpus_per_node={n_gpus}",
        f"trainer.nnodes={nnodes}",
        *overrides,
    ]
    cfg = train_config(params, key)
    if cfg.tie_on != "reward":
        raise InputError(f"{params.source or 'params.yaml'}: {params.profile}.train.shared.tie_on is {cfg.tie_on!r}; "
                         "the verl path ties GRPO groups on rewards only (expected 'reward')")
    verl_cfg = compose_stage(key, stage_overrides)
    wrong = mismatches(verl_cfg, cfg)
    if wrong:
        raise InputError(f"{CONFIG_DIR / (key + '.yaml')} disagrees with params.yaml (profile {params.profile}): "
                         + "; ".join(wrong))
    params_path = Path(params.source or "params.yaml").resolve()
    entry = agent_loop_entry(key, params_path, params.profile, retriever_url, teacher_url, judge_url, send_seed)
    pythonpath = os.pathsep.join(p for p in (str(root), os.environ.get("PYTHONPATH", "")) if p)
    env = {"VERL_USE_EXTERNAL_MODULES": PLUGIN, "PYTHONPATH": pythonpath, "MAOPD_PROFILE": params.profile}
    argv = [python, "-m", "verl.trainer.main_ppo", f"--config-path={CONFIG_DIR}", f"--config-name={key}",
            *stage_overrides]
    return VerlLaunch(key, argv, env, root, files, entry)


def prepare(launch: VerlLaunch, params: Params) -> dict[str, Path]:
    """Write the dataset files and the agent-loop file the command reads."""
    written = write_verl_datasets(launch.cwd, params.train.shared.dev_questions)
    written["agent_loop"] = write_agent_loop_file(launch.files["agent_loop"], [launch.entry])
    return written


def run(launch: VerlLaunch) -> int:
    """Run the command (GPU workers only); its exit status."""
    return subprocess.run(launch.argv, env={**os.environ, **launch.env}, cwd=launch.cwd, check=False).returncode


def export_command(root: Path, key: str, step: int, python: str = sys.executable) -> list[str]:
    """verl.model_merger: the FSDP checkpoint of `step` -> data/models/<weights> (an HF folder)."""
    weights = trained_system(key).weights
    root = Path(root).resolve()
    ckpt = root / "data" / "checkpoints" / "verl" / weights / f"global_step_{step}" / "actor"
    return [python, "-m", "verl.model_merger", "merge", "--backend", "fsdp", "--local_dir", str(ckpt),
            "--target_dir", str(model_dir(root, weights))]
