"""Stage `validate_masks`: roll out the base model in both workflows, write the audit
tables under data/audit/base/ and prove the token attribution right with Great Expectations."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.config import Params, workflow_config
from pipeline.data.dev_sample import dev_sample
from pipeline.domain import WORKFLOWS
from pipeline.errors import ValidationFailed
from pipeline.io import write_parquet
from pipeline.paths import Paths, audit_dir, model_dir
from pipeline.stage_io.inputs import open_policy, open_retriever, read_split
from pipeline.systems import BASE_WEIGHTS
from pipeline.tracking.artifacts import log_data_docs
from pipeline.tracking.runs import stage_run


def audit_rollout(backend, retriever, questions: pd.DataFrame, cfg, trajectories: int, seed: int):
    """Samples and tokens tables of one rollout per workflow, concatenated.

    Ids are unique inside one rollout; the workflow name is prefixed so they stay unique here.
    """
    from pipeline.agents import run_workflow, to_tables

    samples, tokens = [], []
    for i, workflow in enumerate(WORKFLOWS):
        rollout = run_workflow(workflow, questions, backend, retriever, cfg, n_traj=trajectories, seed=seed + i)
        s, t = to_tables(rollout)
        for column in ("sample_id", "trajectory_id", "request_id"):
            s[column] = (workflow + "/" + s[column]).where(s[column] != "", "")
        t["sample_id"] = workflow + "/" + t["sample_id"]
        samples.append(s)
        tokens.append(t)
    return pd.concat(samples, ignore_index=True), pd.concat(tokens, ignore_index=True)


def run_validate_masks(params: Params, root: Path) -> dict:
    from pipeline.validate.masks import validate_masks

    paths = Paths(root)
    cfg_params = params.validate_masks
    with stage_run("validate_masks", params.profile, cfg_params.model_dump(), root=root) as mlf:
        dev = dev_sample(read_split(root, "dev"), cfg_params.questions, cfg_params.seed)
        backend = open_policy(model_dir(root, BASE_WEIGHTS), params.engine)
        retriever = open_retriever(root)
        cfg = workflow_config(params, params.eval.rollout, params.common.protocol.train_candidates)
        samples, tokens = audit_rollout(backend, retriever, dev, cfg, cfg_params.trajectories, cfg_params.seed)
        out = audit_dir(root, BASE_WEIGHTS)
        write_parquet(out / "samples.parquet", samples)
        write_parquet(out / "tokens.parquet", tokens)
        docs_dir = paths.reports(params.profile) / "data_docs" / "masks"
        outcome = validate_masks(samples, tokens, docs_dir, decode=backend.decode)
        mlf.log_metrics({"success": float(outcome.success), "failures": len(outcome.failures),
                         "samples": len(samples), "tokens": len(tokens)})
        log_data_docs(mlf, docs_dir)
    if not outcome.success:
        raise ValidationFailed("validate_masks", outcome.failures)
    return {"samples": len(samples), "tokens": len(tokens), "success": True}
