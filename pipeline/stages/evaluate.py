"""Stage `evaluate@<system>`: each test question 4 times with one Answerer candidate, strict and
flexible extraction, resumable shard by shard (pipeline.eval.run); data/eval/<system>/."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from pipeline.config import Params, workflow_config
from pipeline.errors import InputError
from pipeline.paths import Paths, eval_dir
from pipeline.stage_io.inputs import engine_key, open_eval_backend, open_retriever, read_split
from pipeline.systems import system
from pipeline.tracking.artifacts import KIND_TAG, link_weights
from pipeline.tracking.runs import flatten, stage_run

EVAL_PROTOCOL = ("cascade_steps", "hierarchy_steps", "max_waves", "max_parallel", "top_k", "eval_candidates")


def log_evaluation(mlf: Any, records: Path, weights_sha256: str, system_name: str | None = None) -> None:
    """The records, and the run that wrote the evaluated weights (the run of `system` when
    two runs wrote the same weights)."""
    mlf.set_tag(KIND_TAG, "evaluation")
    mlf.log_artifact(str(records), artifact_path="records")
    link_weights(mlf, weights_sha256, system_name)


def _file_hash(path: Path) -> str:
    from pipeline.policy.model_ref import hash_files

    return hash_files(path.parent, [path.name]) if path.is_file() else "absent"


def evaluation_metrics(records, runs: int) -> dict[str, float]:
    """The MLflow metrics of an evaluation run: macro and per-dataset `avg_at_k`, `pass_at_k`,
    `all_at_k` (`macro_avg_at_4`, `nq_avg_at_4`, ...; MLflow keys hold no `@`), format, workload and
    the funnel's rates (pipeline.eval.funnel_metrics.funnel_metrics)."""
    from pipeline.eval.funnel_metrics import funnel_metrics
    from pipeline.eval.metrics import behaviour, macro_metrics, per_dataset_metrics, workload

    macro = macro_metrics(records, runs=runs).iloc[0]
    wl, bh = workload(records).iloc[0], behaviour(records, runs=runs).iloc[0]
    keys = [f"avg@{runs}", f"pass@{runs}", f"all@{runs}"]
    metrics = {f"macro_{k}": float(macro[k]) for k in keys}
    for _, row in per_dataset_metrics(records, runs=runs).iterrows():
        metrics.update({f"{row['dataset']}_{k}": float(row[k]) for k in keys})
    metrics.update({
        "format_failure_rate": float(bh["format_failure_rate_macro"]),
        "searches_per_workflow": float(wl["search_actions"]),
        "input_tokens_per_workflow": float(wl["input_tokens"]),
        "output_tokens_per_workflow": float(wl["output_tokens"]),
        **funnel_metrics(records),
    })
    return {k.replace("@", "_at_"): v for k, v in metrics.items()}


def run_evaluate(params: Params, root: Path, system_name: str) -> dict:
    """Evaluate one system of pipeline.systems on the test split; write data/eval/<system>/."""
    from pipeline.eval.run import evaluate_system, model_fingerprint

    if system_name is None:
        raise InputError("evaluate: expected a system name argument (python -m pipeline run evaluate <system>)")
    sys_ = system(system_name)
    paths = Paths(root)
    model_dir = sys_.model_dir(root)
    runs = params.common.eval.runs
    protocol = params.common.protocol
    eval_params = {"eval": params.eval.model_dump(), "runs": runs,  # the protocol minus train_candidates
                   "protocol": {k: getattr(protocol, k) for k in EVAL_PROTOCOL}}
    with stage_run(sys_.eval_stage, params.profile,
                   {**eval_params, "system": system_name, "workflow": sys_.workflow,
                    "model_dir": model_dir.relative_to(root).as_posix()},
                   tags=sys_.run_tags, root=root) as mlf:
        test_path = paths.split("test")
        questions = read_split(root, "test")
        backend = open_eval_backend(model_dir, params.engine)
        retriever = open_retriever(root)
        cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
        extra = {
            "model": model_fingerprint(model_dir), "test_split": _file_hash(test_path),
            "index": _file_hash(paths.index / "index.json"),
            "eval_params": hashlib.sha256(repr(sorted(flatten(eval_params).items())).encode()).hexdigest(),
            "engine": engine_key(params.engine),
        }
        out_dir = eval_dir(root, system_name)
        result = evaluate_system(questions, backend, retriever, cfg, runs, params.eval.shard_questions, out_dir,
                                 params.eval.seed, system=system_name, workflow=sys_.workflow,
                                 fingerprint_extra=extra, block_shards=params.eval.block_shards)
        records = result.records
        metrics = evaluation_metrics(records, runs)
        metrics.update({"records": len(records), "shards_computed": result.computed, "shards_reused": result.reused,
                        "seconds": result.seconds})
        mlf.log_metrics(metrics)
        log_evaluation(mlf, out_dir / "records.parquet", extra["model"], system_name)
    return {"system": system_name, "records": len(records), "macro_avg@4": metrics[f"macro_avg_at_{runs}"],
            "shards_computed": result.computed, "shards_reused": result.reused, "seconds": round(result.seconds, 1)}
