"""Stages `evaluate <system>` (4-run evaluation, resumable) and `report` (tables, figures,
metrics.json): thin wiring of pipeline.eval and pipeline.report to the DVC paths."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from pipeline.config import Params, workflow_config
from pipeline.io import InputError
from pipeline.stages.paths import Paths
from pipeline.systems import eval_dir, system
from pipeline.tracking import flatten, stage_run

SGLANG_URL_ENV = "MAOPD_SGLANG_URL"  # base URL of a running SGLang server, e.g. http://127.0.0.1:30000


def load_backend(model_dir: Path):
    """The in-process transformers backend (on the GPU when there is one); when
    $MAOPD_SGLANG_URL names a running SGLang server, that server instead, switched to the
    weights of `model_dir` when it serves another folder (docs/serving.md)."""
    from pipeline.policy.model_ref import resolve_model_dir

    if not ((model_dir / "config.json").is_file() or (model_dir / "model_ref.json").is_file()):
        raise InputError(f"{model_dir}: model folder missing (expected config.json or model_ref.json); "
                         "train or build it first")
    weights = resolve_model_dir(model_dir)
    url = os.environ.get(SGLANG_URL_ENV, "").strip()
    if url:
        from pipeline.policy.sglang_backend import SGLangBackend

        backend = SGLangBackend(url, weights)
        backend.ensure_weights(weights)
        return backend
    import torch

    from pipeline.policy.hf_backend import HFBackend

    cuda = torch.cuda.is_available()
    return HFBackend(str(weights), device="cuda" if cuda else "cpu", dtype=torch.bfloat16 if cuda else None)


def load_retriever(index_dir: Path):
    from pipeline.retrieval.retriever import DenseRetriever

    if not (index_dir / "index.json").is_file():
        raise InputError(f"{index_dir}: index folder missing (expected index.json); run the index stage")
    return DenseRetriever.from_dir(index_dir)


def _file_hash(path: Path) -> str:
    from pipeline.eval.run import hash_files

    return hash_files([path]) if path.is_file() else "absent"


def run_evaluate(params: Params, root: Path, system_name: str) -> dict:
    """Evaluate one system of pipeline.systems on the test split; write data/eval/<system>/."""
    import pandas as pd

    from pipeline.eval.metrics import behaviour, macro_metrics, per_dataset_metrics, workload
    from pipeline.eval.run import evaluate_system, model_fingerprint

    if system_name is None:
        raise InputError("evaluate: expected a system name argument (python -m pipeline run evaluate <system>)")
    try:
        sys_ = system(system_name)
    except KeyError as e:
        raise InputError(str(e.args[0])) from None
    paths = Paths(root)
    test_path = paths.split("test")
    if not test_path.is_file():
        raise InputError(f"{test_path}: test split missing; run the splits stage")
    questions = pd.read_parquet(test_path)
    model_dir = sys_.model_dir(root)
    backend = load_backend(model_dir)
    retriever = load_retriever(paths.index)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    runs = params.common.eval.runs
    eval_params = {"eval": params.eval.model_dump(), "protocol": params.common.protocol.model_dump(), "runs": runs}
    extra = {
        "model": model_fingerprint(model_dir), "test_split": _file_hash(test_path),
        "index": _file_hash(paths.index / "index.json"),
        "eval_params": hashlib.sha256(repr(sorted(flatten(eval_params).items())).encode()).hexdigest(),
    }
    out_dir = eval_dir(root, system_name)
    result = evaluate_system(questions, backend, retriever, cfg, runs, params.eval.shard_questions, out_dir,
                             params.eval.seed, system=system_name, workflow=sys_.workflow, fingerprint_extra=extra)
    records = result.records
    macro = macro_metrics(records, runs=runs).iloc[0]
    per_dataset = per_dataset_metrics(records, runs=runs)
    wl, bh = workload(records).iloc[0], behaviour(records, runs).iloc[0]
    keys = [f"avg@{runs}", f"pass@{runs}", f"all@{runs}"]
    metrics = {f"macro_{k}": float(macro[k]) for k in keys}
    for _, row in per_dataset.iterrows():
        metrics.update({f"{row['dataset']}_{k}": float(row[k]) for k in keys})
    metrics.update({
        "format_failure_rate": float(bh["format_failure_rate_macro"]),
        "searches_per_workflow": float(wl["search_actions"]),
        "input_tokens_per_workflow": float(wl["input_tokens"]),
        "output_tokens_per_workflow": float(wl["output_tokens"]),
        "records": len(records), "shards_computed": result.computed, "shards_reused": result.reused,
        "seconds": result.seconds,
    })
    metrics = {k.replace("@", "_at_"): v for k, v in metrics.items()}  # MLflow keys: no "@"
    with stage_run(f"evaluate@{system_name}", params.profile,
                   {**eval_params, "system": system_name, "workflow": sys_.workflow, "model_dir": str(model_dir)},
                   tags={"system": system_name}, root=root) as mlf:
        mlf.log_metrics(metrics)
    return {"system": system_name, "records": len(records), "macro_avg@4": float(macro[keys[0]]),
            "shards_computed": result.computed, "shards_reused": result.reused, "seconds": round(result.seconds, 1)}


def run_report(params: Params, root: Path) -> dict:
    """Tables, figures, paper.md/html, main_table.tex and reports/metrics.json."""
    from pipeline.report.build import build_report

    out = build_report(params, root)
    with stage_run("report", params.profile, {"target_system": params.common.eval.target_system}, root=root) as mlf:
        for name, values in out.metrics["systems"].items():
            mlf.log_metrics({f"{name}.macro_{m.replace('@', '_at_')}": v
                             for m, v in values["macro"].items() if v is not None})
        mlf.log_metric("seconds", out.seconds)
        mlf.log_artifact(str(out.metrics_path))
        mlf.log_artifact(str(out.folder / "paper.md"))
    return {"systems": len(out.results.present), "missing": out.results.missing, "curves": out.curves,
            "runs_used": out.runs_used, "seconds": round(out.seconds, 2)}
