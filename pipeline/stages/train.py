"""Stage `train@<system>`: train one system of pipeline.systems (the Stage-I Teacher `c_mas_rl`,
MultiAgent-OPD, the three ablations and the Prompted Critic) with pipeline.rl.trainer; one MLflow run.

It reads data/splits/{train,dev}.parquet, data/index, data/models/base (the student's start,
always), the Teacher and judge the system's training names, and for a Stage-II system the shared
start of data/stage2_start/ (its step-0 dev metrics and dev KL contexts), and writes data/models/<system>
(atomically) and its training curves to data/curves/<system>.csv (the report's only source of
curves), with audit tables in data/audit/<system>/ and resumable checkpoints in
data/checkpoints/<system>/. Its numbers are pipeline.rl.train_params.train_config's.
"""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.paths import audit_dir, checkpoint_dir, model_dir
from pipeline.policy.hf_backend import save_hf_folder
from pipeline.report.curves import CURVE_METRICS, stage_curves_path, write_stage_curves
from pipeline.rl.checkpoint import find_latest, inputs_fingerprint
from pipeline.rl.train_params import train_config
from pipeline.rl.trainer import TrainInputs, checkpoint_fingerprint, train
from pipeline.stage_io.inputs import engine_key, open_policy, open_retriever, read_split, require_model
from pipeline.stage_io.run_logging import log_training
from pipeline.stages.stage2_start import read_stage2_start
from pipeline.systems import BASE_WEIGHTS, TEACHER, trained_system
from pipeline.tracking.runs import CurveLogger, flatten, stage_run

RUN_ID = "mlflow_run_id"  # the checkpoint's meta key of the MLflow run it was written under


def run_train(params: Params, root: Path, name: str | None) -> dict:
    """Train system `name` and save its weights.

    The MLflow run opens before the models load. A stage that resumes from a checkpoint
    continues the run that checkpoint was written under (a new one if the store lost it), and
    the checkpoint's metric history fills in what the run lacks; per-step metrics reach MLflow
    after each checkpoint, so no step is ever logged twice (pipeline.tracking.runs.CurveLogger)."""
    if name is None:
        raise InputError("train: expected a system name argument (python -m pipeline run train <system>)")
    start = time.perf_counter()
    target = trained_system(name)
    training = target.training
    cfg = train_config(params, target.name)
    base = model_dir(root, BASE_WEIGHTS)
    train_questions, dev_questions = read_split(root, "train"), read_split(root, "dev")
    weights = [base] + ([model_dir(root, training.teacher)] if training.teacher else [])
    for folder in weights:
        require_model(folder)
    fingerprint = inputs_fingerprint(weights, [train_questions["id"].tolist(), dev_questions["id"].tolist(),
                                               [engine_key(params.engine)]])
    checkpoints = checkpoint_dir(root, target.weights)
    found = find_latest(checkpoints, checkpoint_fingerprint(cfg, fingerprint))
    logged = {"system": target.name, "shared": params.train.shared.model_dump(),
              "train": getattr(params.train.systems, target.name).model_dump(),
              "optim": params.common.optim.model_dump(), "rewards": params.common.rewards.model_dump()}
    with stage_run(target.train_stage, params.profile, logged, tags=target.run_tags, root=root,
                   resume_run_id=found.meta.get(RUN_ID) if found else None) as mlf:
        curve = CurveLogger(mlf, every=None)
        if found:
            curve.restore(found.history)
            mlf.set_tag("resumed_from_step", str(found.step))
        teacher = open_policy(model_dir(root, training.teacher), params.engine) if training.teacher else None
        reference = None  # the Stage-I Teacher, for the dev KL diagnostic of every Stage-II system
        if target.workflow == "hierarchy":
            reference = teacher if training.teacher == TEACHER else open_policy(model_dir(root, TEACHER), params.engine)
        inputs = TrainInputs(
            policy=open_policy(base, params.engine),
            retriever=open_retriever(root),
            train_questions=train_questions,
            dev_questions=dev_questions,
            teacher=teacher,
            judge=open_policy(model_dir(root, training.judge), params.engine) if training.judge else None,
            reference=reference,
            start=read_stage2_start(root, cfg.dev, dev_questions["id"].tolist(), engine_key(params.engine))
            if reference is not None else None,
            checkpoint_dir=checkpoints,
            audit_dir=audit_dir(root, target.name),
            inputs_fingerprint=fingerprint,
            checkpoint_meta={RUN_ID: mlf.active_run().info.run_id},
        )
        result = train(cfg, inputs, log_fn=curve, on_checkpoint=lambda step: curve.flush())
        curve.flush()
        out = model_dir(root, target.weights)
        save_hf_folder(inputs.policy.model, inputs.policy.tokenizer, out)
        settings = flatten(logged)
        write_stage_curves(stage_curves_path(root, target.name), result.history,
                           {m.key: _int_or_none(settings.get(m.questions_param)) for m in CURVE_METRICS})
        seconds = time.perf_counter() - start
        mlf.log_metrics({"train_seconds": seconds, "resumed_from": result.resumed_from})
        log_training(mlf, params, root, out, target.name, target.train_stage, inputs.audit_dir)
    return {"system": target.name, "steps": result.steps, "resumed_from": result.resumed_from,
            "seconds": round(seconds, 1), "model": str(out)}


def _int_or_none(value: object) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None
