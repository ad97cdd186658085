"""Stages `splits`, `corpus`, `validate_splits` and `index`: thin wiring of the data and
retrieval packages to the paths of the DVC contract, with one MLflow run each."""

from __future__ import annotations

import time
from pathlib import Path

import pandas as pd

from pipeline.config import Params
from pipeline.errors import InputError, ValidationFailed
from pipeline.io import write_json, write_parquet
from pipeline.paths import Paths
from pipeline.stages.inputs import read_corpus, read_split
from pipeline.tracking import stage_run


def _world(params: Params):
    from pipeline.data.world import WorldConfig, generate_world

    cfg = WorldConfig.from_dict(dict(params.data.world), where=f"{params.source}: {params.profile}.data.world")
    return generate_world(cfg)


def load_question_pool(params: Params, root: Path) -> pd.DataFrame:
    """All candidate questions (before dedup and sampling) of the active profile."""
    if params.data.source == "synthetic":
        return _world(params).questions
    from pipeline.data.loaders import load_raw_dir

    questions, _ = load_raw_dir(root / params.data.raw_dir)
    return questions


def run_splits(params: Params, root: Path) -> dict:
    from pipeline.data.dedup import make_splits

    paths = Paths(root)
    start = time.perf_counter()
    with stage_run("splits", params.profile, params.data.model_dump(), root=root) as mlf:
        pool = load_question_pool(params, root)
        result = make_splits(
            pool,
            train_datasets=list(params.data.train_datasets),
            test_quotas=dict(params.data.test_quotas),
            dev_size=params.data.dev_size,
            seed=params.data.seed,
        )
        for name, frame in (("train", result.train), ("dev", result.dev), ("test", result.test)):
            write_parquet(paths.split(name), frame)
        write_json(paths.dedup_report, result.report)
        seconds = time.perf_counter() - start
        mlf.log_metrics({
            "pool_questions": len(pool), "train": len(result.train), "dev": len(result.dev),
            "test": len(result.test), "seconds": seconds,
        })
        mlf.log_artifact(str(paths.dedup_report))
    return {"train": len(result.train), "dev": len(result.dev), "test": len(result.test)}


def run_corpus(params: Params, root: Path) -> dict:
    paths = Paths(root)
    if params.index.kind == "prebuilt":
        return _prebuilt_corpus(params, root)
    with stage_run("corpus", params.profile, {"source": params.data.source}, root=root) as mlf:
        if params.data.source == "synthetic":
            passages = _world(params).passages
        else:
            from pipeline.data.loaders import load_raw_dir

            _, passages = load_raw_dir(root / params.data.raw_dir)
        passages = passages[["id", "title", "text", "contents"]].reset_index(drop=True)
        if passages.empty:
            raise InputError(f"{root / params.data.raw_dir / 'corpus'}: no passages; expected corpus files "
                             f"(*.jsonl, *.json, *.parquet) holding at least one passage")
        if passages["id"].duplicated().any():
            dup = passages.loc[passages["id"].duplicated(), "id"].iloc[0]
            raise InputError(f"corpus: passage id {dup!r} repeats; expected unique ids")
        write_parquet(paths.corpus, passages)
        mlf.log_metric("passages", len(passages))
    return {"passages": len(passages)}


def _prebuilt_corpus(params: Params, root: Path) -> dict:
    """The corpus of a prebuilt index is its own jsonl (row i = vector i), converted as it
    streams; the raw corpus folder is not read."""
    from pipeline.data.loaders import convert_jsonl_corpus

    source = root / str(params.index.corpus)
    count = convert_jsonl_corpus(source, Paths(root).corpus)
    if count == 0:
        Paths(root).corpus.unlink()
        raise InputError(f"{source}: no passages; expected the jsonl corpus of index.faiss_index")
    with stage_run("corpus", params.profile, {"source": "prebuilt", "corpus": params.index.corpus}, root=root) as mlf:
        mlf.log_metric("passages", count)
    return {"passages": count}


def run_validate_splits(params: Params, root: Path) -> dict:
    from pipeline.validate.splits import validate_splits

    paths = Paths(root)
    with stage_run("validate_splits", params.profile, root=root) as mlf:
        frames = {name: read_split(root, name) for name in ("train", "dev", "test")}
        docs_dir = paths.reports(params.profile) / "data_docs" / "splits"
        outcome = validate_splits(
            frames["train"], frames["dev"], frames["test"], dict(params.data.test_quotas), docs_dir
        )
        results = dict(outcome.results)
        docs = Path(results.get("data_docs", ""))
        if docs.is_absolute() and docs.is_relative_to(root.resolve()):
            results["data_docs"] = docs.relative_to(root.resolve()).as_posix()  # no machine path in an output
        summary = {"success": outcome.success, "failures": outcome.failures, "results": results}
        out = paths.validation / "splits.json"
        write_json(out, summary)
        mlf.log_metric("success", float(outcome.success))
        mlf.log_metric("failures", len(outcome.failures))
        mlf.log_artifact(str(out))
    if not outcome.success:
        raise ValidationFailed("validate_splits", outcome.failures)
    return {"success": True}


def run_index(params: Params, root: Path) -> dict:
    from pipeline.retrieval.encoders import concrete_encoder, encoder_ref, make_encoder

    paths = Paths(root)
    ip = params.index
    concrete = concrete_encoder(ip.encoder)  # "auto" names the one this CPU runs fast
    with stage_run("index", params.profile, {**ip.model_dump(), "encoder_used": concrete}, root=root) as mlf:
        encoder = make_encoder(concrete, device=ip.device, root=root)
        name = encoder_ref(concrete, root)  # relative to the root: any checkout opens the index
        start = time.perf_counter()
        if ip.kind == "prebuilt":
            from pipeline.retrieval.index import write_prebuilt_meta

            info = write_prebuilt_meta(paths.index, str(ip.faiss_index), str(ip.corpus), name, root,
                                       encoder_dim=encoder.dim, gpu_fp16=ip.gpu_fp16)
            count = info["count"]
        else:
            from pipeline.retrieval.index import build_index

            passages = read_corpus(root)
            info = build_index(passages, encoder, paths.index, batch_size=ip.batch_size, spec=ip.spec(),
                               seed=ip.train_seed, encoder_name=name)
            count = len(passages)
        seconds = time.perf_counter() - start
        mlf.log_metrics({"passages": count, "seconds": seconds,
                         "passages_per_second": count / max(seconds, 1e-9)})
    return dict(info)
