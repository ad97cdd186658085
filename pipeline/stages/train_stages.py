"""Training stages: `teacher` (Stage I), `team` (MultiAgent-OPD), `ablation` (item in
pipeline.systems.ABLATIONS) and `prompted_critic`. Thin wiring of pipeline.rl.trainer to the
DVC paths, one MLflow run each.

Each stage reads data/splits/{train,dev}.parquet, data/index, data/models/base (the student's
start, always), data/models/teacher where the mode uses the Stage-I Teacher, and writes
data/models/<weights> (atomically), with audit tables in data/audit/<system>/ and resumable
checkpoints in data/checkpoints/<weights>/. DVC params: `<profile>.train.shared`,
`<profile>.train.systems.<key>` and `common` (protocol, rewards, optim).
"""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from pipeline.config import Params
from pipeline.io import InputError
from pipeline.policy.hf_backend import HFBackend
from pipeline.rl.checkpoint import inputs_fingerprint
from pipeline.rl.train_params import TRAIN_KEYS, train_config
from pipeline.rl.trainer import TrainInputs, train
from pipeline.stages.paths import Paths
from pipeline.systems import ABLATIONS, audit_dir, checkpoint_dir, model_dir, system
from pipeline.tracking import stage_run

# Which Teacher each mode uses (weights folder under data/models/), None: no Teacher.
TEACHER_WEIGHTS: dict[str, str | None] = {
    "stage1": None,
    "opd": "teacher",
    "base_teacher": "base",
    "outcome_rl_searcher": "teacher",
    "no_searcher_supervision": "teacher",
    "prompted_critic": None,
}


def open_retriever(root: Path):
    from pipeline.retrieval.retriever import DenseRetriever

    return DenseRetriever.from_dir(Paths(root).index)


def open_backend(path: Path) -> HFBackend:
    """A model folder as a backend on the GPU when there is one (tests replace this)."""
    import torch

    if not (Path(path) / "config.json").is_file():
        raise InputError(f"{path}: expected a trained model folder (config.json); run its stage first")
    return HFBackend(path, device="cuda" if torch.cuda.is_available() else "cpu")


def _split(root: Path, name: str) -> pd.DataFrame:
    path = Paths(root).split(name)
    if not path.is_file():
        raise InputError(f"{path}: missing split; run the `splits` stage first")
    return pd.read_parquet(path)


def train_system(params: Params, root: Path, key: str, run_name: str) -> dict:
    """Train the system of `train.systems.<key>` and save its weights."""
    mode, system_name = TRAIN_KEYS[key]
    target = system(system_name)
    cfg = train_config(params, key)
    base = model_dir(root, "base")
    teacher_weights = TEACHER_WEIGHTS[mode]
    train_questions, dev_questions = _split(root, "train"), _split(root, "dev")
    weights = [base] + ([model_dir(root, teacher_weights)] if teacher_weights else [])
    inputs = TrainInputs(
        policy=open_backend(base),
        retriever=open_retriever(root),
        train_questions=train_questions,
        dev_questions=dev_questions,
        teacher=open_backend(model_dir(root, teacher_weights)) if teacher_weights else None,
        judge=open_backend(base) if mode == "prompted_critic" else None,
        checkpoint_dir=checkpoint_dir(root, target.weights),
        audit_dir=audit_dir(root, target.name),
        inputs_fingerprint=inputs_fingerprint(
            weights, [train_questions["id"].tolist(), dev_questions["id"].tolist()]),
    )
    logged = {"mode": mode, "shared": params.train.shared.model_dump(),
              "system": getattr(params.train.systems, key).model_dump(),
              "optim": params.common.optim.model_dump(), "rewards": params.common.rewards.model_dump()}
    start = time.perf_counter()
    with stage_run(run_name, params.profile, logged, tags={"system": target.name}, root=root) as mlf:
        result = train(cfg, inputs, log_fn=lambda step, metrics: mlf.log_metrics(metrics, step=step))
        out = model_dir(root, target.weights)
        from pipeline.policy.tiny_model import save_hf_folder

        save_hf_folder(inputs.policy.model, inputs.policy.tokenizer, out)
        seconds = time.perf_counter() - start
        mlf.log_metrics({"train_seconds": seconds, "resumed_from": result.resumed_from})
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
