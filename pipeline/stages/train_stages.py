"""Training stages: `teacher` (Stage I), `team` (MultiAgent-OPD), `ablation` (item in
pipeline.systems.ABLATIONS) and `prompted_critic`. Thin wiring of pipeline.rl.trainer to the
DVC paths, one MLflow run each.

Each stage reads data/splits/{train,dev}.parquet, data/index, data/models/base (the student's
start, always) and the Teacher and judge its training mode names (pipeline.rl.modes), and
writes data/models/<weights> (atomically), with audit tables in data/audit/<system>/ and
resumable checkpoints in data/checkpoints/<weights>/. DVC params: `<profile>.train.shared`,
`<profile>.train.systems.<key>` and `common` (protocol, rewards, optim), which
pipeline.rl.train_params turns into the run's TrainConfig.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.paths import audit_dir, checkpoint_dir, model_dir
from pipeline.policy.hf_backend import save_hf_folder
from pipeline.rl.checkpoint import inputs_fingerprint
from pipeline.rl.modes import mode_of_key
from pipeline.rl.train_params import train_config
from pipeline.rl.trainer import TrainInputs, train
from pipeline.stages.inputs import open_policy, open_retriever, read_split
from pipeline.stages.run_logging import log_training
from pipeline.systems import ABLATIONS, trained_by
from pipeline.tracking import stage_run


def train_system(params: Params, root: Path, key: str, run_name: str) -> dict:
    """Train the system of `train.systems.<key>` and save its weights."""
    mode = mode_of_key(key)
    target = trained_by(mode.name)
    cfg = train_config(params, key)
    base = model_dir(root, "base")
    train_questions, dev_questions = read_split(root, "train"), read_split(root, "dev")
    weights = [base] + ([model_dir(root, mode.teacher)] if mode.teacher else [])
    inputs = TrainInputs(
        policy=open_policy(base),
        retriever=open_retriever(root),
        train_questions=train_questions,
        dev_questions=dev_questions,
        teacher=open_policy(model_dir(root, mode.teacher)) if mode.teacher else None,
        judge=open_policy(model_dir(root, mode.judge)) if mode.judge else None,
        checkpoint_dir=checkpoint_dir(root, target.weights),
        audit_dir=audit_dir(root, target.name),
        inputs_fingerprint=inputs_fingerprint(
            weights, [train_questions["id"].tolist(), dev_questions["id"].tolist()]),
    )
    logged = {"mode": mode.name, "shared": params.train.shared.model_dump(),
              "system": getattr(params.train.systems, key).model_dump(),
              "optim": params.common.optim.model_dump(), "rewards": params.common.rewards.model_dump()}
    start = time.perf_counter()
    with stage_run(run_name, params.profile, logged, tags={"system": target.name}, root=root) as mlf:
        result = train(cfg, inputs, log_fn=lambda step, metrics: mlf.log_metrics(metrics, step=step))
        out = model_dir(root, target.weights)
        save_hf_folder(inputs.policy.model, inputs.policy.tokenizer, out)
        seconds = time.perf_counter() - start
        mlf.log_metrics({"train_seconds": seconds, "resumed_from": result.resumed_from})
        log_training(mlf, params, root, out, target.name, run_name, inputs.audit_dir)
    return {"system": target.name, "steps": result.steps, "resumed_from": result.resumed_from,
            "seconds": round(seconds, 1), "model": str(out)}


def run_teacher(params: Params, root: Path) -> dict:
    return train_system(params, root, "teacher", "teacher")


def run_team(params: Params, root: Path) -> dict:
    return train_system(params, root, "team", "team")


def run_prompted_critic(params: Params, root: Path) -> dict:
    return train_system(params, root, "prompted_critic", "prompted_critic")


def run_ablation(params: Params, root: Path, item: str) -> dict:
    if item not in ABLATIONS:
        raise InputError(f"ablation: unknown item {item!r}; expected one of {', '.join(ABLATIONS)}")
    return train_system(params, root, item, f"ablation@{item}")
