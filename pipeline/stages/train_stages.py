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
from pipeline.rl.checkpoint import find_latest, inputs_fingerprint
from pipeline.rl.modes import mode_of_key
from pipeline.rl.train_params import train_config
from pipeline.rl.trainer import TrainInputs, checkpoint_fingerprint, train
from pipeline.stages.inputs import open_policy, open_retriever, read_split, require_model
from pipeline.stages.run_logging import log_training
from pipeline.systems import ABLATIONS, trained_by
from pipeline.tracking import CurveLogger, stage_run

RUN_ID = "mlflow_run_id"  # the checkpoint's meta key of the MLflow run it was written under
REFERENCE_TEACHER = "teacher"  # data/models/teacher: the Stage-I weights


def train_system(params: Params, root: Path, key: str, run_name: str) -> dict:
    """Train the system of `train.systems.<key>` and save its weights.

    The MLflow run opens before the models load. A stage that resumes from a checkpoint
    continues the run that checkpoint was written under (a new one if the store lost it), and
    the checkpoint's metric history fills in what the run lacks; per-step metrics reach MLflow
    after each checkpoint, so no step is ever logged twice (pipeline.tracking.CurveLogger)."""
    start = time.perf_counter()
    mode = mode_of_key(key)
    target = trained_by(mode.name)
    cfg = train_config(params, key)
    base = model_dir(root, "base")
    train_questions, dev_questions = read_split(root, "train"), read_split(root, "dev")
    weights = [base] + ([model_dir(root, mode.teacher)] if mode.teacher else [])
    for folder in weights:
        require_model(folder)
    fingerprint = inputs_fingerprint(weights, [train_questions["id"].tolist(), dev_questions["id"].tolist()])
    checkpoints = checkpoint_dir(root, target.weights)
    found = find_latest(checkpoints, checkpoint_fingerprint(cfg, fingerprint))
    logged = {"mode": mode.name, "shared": params.train.shared.model_dump(),
              "system": getattr(params.train.systems, key).model_dump(),
              "optim": params.common.optim.model_dump(), "rewards": params.common.rewards.model_dump()}
    with stage_run(run_name, params.profile, logged, tags={"system": target.name}, root=root,
                   resume_run_id=found.meta.get(RUN_ID) if found else None) as mlf:
        curve = CurveLogger(mlf, every=None)
        if found:
            curve.restore(found.history)
            mlf.set_tag("resumed_from_step", str(found.step))
        teacher = open_policy(model_dir(root, mode.teacher)) if mode.teacher else None
        reference = None  # the Stage-I Teacher, for the dev KL diagnostic of every Stage-II system
        if mode.workflow == "hierarchy":
            reference = teacher if mode.teacher == REFERENCE_TEACHER else open_policy(model_dir(root, REFERENCE_TEACHER))
        inputs = TrainInputs(
            policy=open_policy(base),
            retriever=open_retriever(root),
            train_questions=train_questions,
            dev_questions=dev_questions,
            teacher=teacher,
            judge=open_policy(model_dir(root, mode.judge)) if mode.judge else None,
            reference=reference,
            checkpoint_dir=checkpoints,
            audit_dir=audit_dir(root, target.name),
            inputs_fingerprint=fingerprint,
            checkpoint_meta={RUN_ID: mlf.active_run().info.run_id},
        )
        result = train(cfg, inputs, log_fn=curve, on_checkpoint=lambda step: curve.flush())
        curve.flush()
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
