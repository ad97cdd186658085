"""Stage `splits`: the question pool deduplicated on the normalised question and sampled into
train, dev and test (pipeline.data.dedup); one MLflow run."""

from __future__ import annotations

import time
from pathlib import Path

from pipeline.config import Params
from pipeline.io import write_json, write_parquet
from pipeline.paths import Paths
from pipeline.stage_io.sources import load_question_pool
from pipeline.tracking.runs import stage_run


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
