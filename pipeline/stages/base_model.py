"""Stage `base_model`: the base model every system starts from, and its behaviour on dev.

scratch (tiny, ci): the recipe of pipeline.basemodel.recipe -> HF folder data/models/base.
local (paper): check and hash the local folder; write data/models/base/model_ref.json.
Then (behaviour_questions > 0) both workflows run once on dev questions with the saved
model at the evaluation's sampling; the figures go to data/metrics/base_behaviour.json and MLflow.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from pipeline.config import Params, workflow_config
from pipeline.data.dev_sample import dev_sample
from pipeline.io import write_json
from pipeline.paths import model_dir
from pipeline.stage_io.inputs import open_policy, open_retriever, read_corpus, read_split
from pipeline.stage_io.run_logging import log_weights
from pipeline.systems import BASE_WEIGHTS
from pipeline.tracking.runs import CurveLogger, stage_run


def behaviour_path(root: Path) -> Path:
    """The DVC metric file of the stage (outside the model folder, so DVC can track both)."""
    return root / "data" / "metrics" / "base_behaviour.json"


def run_base_model(params: Params, root: Path) -> dict:
    bm = params.base_model
    out = model_dir(root, BASE_WEIGHTS)
    with stage_run("base_model", params.profile, bm.model_dump(), root=root) as mlf:
        if bm.kind == "local":
            from pipeline.policy.model_ref import write_model_ref

            start = time.perf_counter()
            ref = write_model_ref(root / bm.path, out, source=bm.path)
            mlf.set_tag("model_sha256", ref["sha256"])
            mlf.log_metrics({"files": len(ref["files"]), "hash_seconds": time.perf_counter() - start})
            summary: dict[str, Any] = {"kind": "local", "sha256": ref["sha256"], "files": len(ref["files"])}
        else:
            from pipeline.basemodel.recipe import train_base_model

            train = read_split(root, "train")
            corpus = read_corpus(root)
            figures = train_base_model(params, train, corpus, open_retriever(root), out,
                                       curves=lambda name: CurveLogger(mlf, name))
            mlf.log_metrics({k: float(v) for k, v in figures.items()})
            summary = {"kind": "scratch", **figures}
        if bm.behaviour_questions > 0:
            start = time.perf_counter()
            behaviour = measure_behaviour(params, root, out)
            write_json(behaviour_path(root), behaviour)  # no timing in it: the same run gives the same file
            mlf.log_metrics({**_flat_metrics(behaviour), "behaviour_seconds": time.perf_counter() - start})
            mlf.log_artifact(str(behaviour_path(root)))
            summary["behaviour"] = behaviour
        log_weights(mlf, params, root, out, "base_model", "base_model", kind="base_model")
    return summary


def measure_behaviour(params: Params, root: Path, base_dir: Path, *, sampling_seed: int | None = None) -> dict:
    """pipeline.basemodel.behaviour on `behaviour_questions` dev questions (a draw over both
    training datasets, keyed by the evaluation's seed), with the model in `base_dir`, at the
    evaluation's sampling temperature; sampled with `sampling_seed`, by default the evaluation's
    seed (another seed samples the same questions with other random numbers)."""
    from pipeline.basemodel.behaviour import measure_behaviour as measure

    dev = dev_sample(read_split(root, "dev"), params.base_model.behaviour_questions, params.eval.seed)
    cfg = workflow_config(params, params.eval.rollout, params.common.protocol.eval_candidates)
    return measure(open_policy(base_dir, params.engine), open_retriever(root), dev, cfg,
                   params.eval.seed if sampling_seed is None else sampling_seed)


def _flat_metrics(behaviour: dict) -> dict[str, float]:
    out = {}
    for key, value in behaviour.items():
        if isinstance(value, dict):
            out.update({f"behaviour_{key}_{k}": float(v) for k, v in value.items()})
        else:
            out[f"behaviour_{key}"] = float(value)
    return out
