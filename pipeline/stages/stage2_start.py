"""Stage `stage2_start`: what every Stage-II run starts from, computed once for the five of them:
the Stage-I Teacher's own Searcher calls in the hierarchy on the dev questions (the fixed
contexts of the dev Searcher KL) and the base model's dev metrics before any update (step 0 of
every Stage-II curve). The five systems share their start weights, dev questions and seeds, so
each of them would compute exactly these numbers.

Writes data/stage2_start/contexts.parquet and metrics.json (with the fingerprint of what they
were computed from, which a training stage checks before it reads them).
"""

from __future__ import annotations

import json
from pathlib import Path

from pipeline.config import Params
from pipeline.errors import InputError
from pipeline.io import read_parquet, write_json, write_parquet
from pipeline.paths import model_dir
from pipeline.rl.checkpoint import inputs_fingerprint
from pipeline.rl.diagnostics import Contexts
from pipeline.rl.train_params import DevSettings, dev_settings
from pipeline.rl.trainer import SharedStart, TrainInputs, shared_start
from pipeline.stage_io.inputs import engine_key, open_policy, open_retriever, read_split
from pipeline.systems import BASE_WEIGHTS, TEACHER
from pipeline.tracking.runs import stage_run

CONTEXTS = "contexts.parquet"
METRICS = "metrics.json"


def start_dir(root: Path) -> Path:
    return root / "data" / "stage2_start"


def start_fingerprint(root: Path, dev: DevSettings, dev_ids: list[str], engine: str) -> str:
    """The base and Teacher weights, the dev questions, how they are sampled and the engine's
    settings (`engine_key`)."""
    weights = inputs_fingerprint([model_dir(root, BASE_WEIGHTS), model_dir(root, TEACHER)], [dev_ids])
    grouped = "-grouped-generation" if dev.dev_rollout.grouped_generation else ""
    return f"{weights}-{dev!r}{grouped}-{engine}"


def run_stage2_start(params: Params, root: Path) -> dict:
    dev = dev_settings(params)
    dev_questions = read_split(root, "dev")
    with stage_run("stage2_start", params.profile, {"dev_questions": dev.dev_questions}, root=root) as mlf:
        inputs = TrainInputs(policy=open_policy(model_dir(root, BASE_WEIGHTS), params.engine),
                             retriever=open_retriever(root),
                             train_questions=dev_questions.head(0), dev_questions=dev_questions,
                             reference=open_policy(model_dir(root, TEACHER), params.engine))
        start = shared_start(dev, inputs)
        out = start_dir(root)
        write_parquet(out / CONTEXTS, start.contexts.to_frame())
        write_json(out / METRICS, {"metrics": start.metrics,
                                   "fingerprint": start_fingerprint(root, dev, dev_questions["id"].tolist(),
                                                                    engine_key(params.engine))})
        mlf.log_metrics({**start.metrics, "contexts": len(start.contexts)})
    return {"contexts": len(start.contexts), **start.metrics}


def read_stage2_start(root: Path, dev: DevSettings, dev_ids: list[str], engine: str) -> SharedStart:
    """The stage's outputs, refused when they were computed from other weights, dev questions or
    sampling (run `stage2_start` again)."""
    folder = start_dir(root)
    try:
        stored = json.loads((folder / METRICS).read_text())
    except (OSError, ValueError) as e:
        raise InputError(f"{folder / METRICS}: cannot read the shared Stage-II start ({e}); "
                         "run the `stage2_start` stage") from None
    if stored.get("fingerprint") != start_fingerprint(root, dev, dev_ids, engine):
        raise InputError(f"{folder / METRICS}: computed from other weights, dev questions or sampling; "
                         "run the `stage2_start` stage again")
    contexts = Contexts.from_frame(read_parquet(folder / CONTEXTS, "the `stage2_start` stage"))
    return SharedStart(contexts, {k: float(v) for k, v in stored["metrics"].items()})
