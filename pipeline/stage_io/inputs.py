"""What stages open: a split, the retriever of data/index, a model folder as a backend.
Each fails with an InputError naming the missing file and the stage that makes it."""

from __future__ import annotations

import os
from pathlib import Path

import pandas as pd

from pipeline.config import EngineParams
from pipeline.errors import InputError
from pipeline.io import read_parquet
from pipeline.paths import Paths

SGLANG_URL_ENV = "MAOPD_SGLANG_URL"  # base URL of a running SGLang server, e.g. http://127.0.0.1:30000


def read_split(root: Path, name: str) -> pd.DataFrame:
    """data/splits/<name>.parquet."""
    return read_parquet(Paths(root).split(name), "the `splits` stage")


def read_corpus(root: Path) -> pd.DataFrame:
    """data/corpus/passages.parquet, which must hold at least one passage."""
    path = Paths(root).corpus
    passages = read_parquet(path, "the `corpus` stage")
    if passages.empty:
        raise InputError(f"{path}: no passages; expected at least one row from the `corpus` stage, rerun it")
    return passages


def open_retriever(root: Path):
    """The dense retriever of data/index (its encoder named in index.json)."""
    from pipeline.retrieval.retriever import DenseRetriever

    index_dir = Paths(root).index
    if not (index_dir / "index.json").is_file():
        raise InputError(f"{index_dir}: index folder missing (expected index.json); run the `index` stage")
    return DenseRetriever.from_dir(index_dir, root=root)


def require_model(model_dir: Path) -> None:
    if not ((model_dir / "config.json").is_file() or (model_dir / "model_ref.json").is_file()):
        raise InputError(f"{model_dir}: model folder missing (expected config.json or model_ref.json); "
                         "train or build it first")


def engine_config(engine: EngineParams):
    """The engine's settings of a profile, `auto` bf16 resolved on this CPU."""
    from pipeline.engine.base import EngineConfig
    from pipeline.precision import resolve_bf16

    return EngineConfig(max_rows=engine.max_rows, prefill_tokens=engine.prefill_tokens,
                        prefix_cache_tokens=engine.prefix_cache_tokens, bf16=resolve_bf16(engine.bf16))


def engine_key(engine: EngineParams) -> str:
    """What the engine's settings change in a stage's outputs (its floating-point sums), for the
    fingerprints that decide whether stored shards, checkpoints or a shared start are reused."""
    return repr(engine_config(engine))


def open_policy(model_dir: Path, engine: EngineParams):
    """A model folder as an in-process backend with float32 weights: on the CPU the engine
    (pipeline.engine, with the profile's `engine` settings), on a GPU the transformers reference
    backend. What training updates, and what rolls out the base model's checks."""
    import torch

    from pipeline.policy.model_ref import resolve_model_dir

    require_model(Path(model_dir))
    weights = resolve_model_dir(model_dir)
    if torch.cuda.is_available():
        from pipeline.policy.hf_backend import HFBackend

        return HFBackend(weights, device="cuda")
    from pipeline.engine.backend import EngineBackend

    return EngineBackend(weights, config=engine_config(engine))


def open_eval_backend(model_dir: Path, engine: EngineParams):
    """The evaluation's backend: in process (the engine on the CPU, bfloat16 transformers on the GPU
    when there is one), or, when
    $MAOPD_SGLANG_URL names a running SGLang server, that server, switched to the weights of
    `model_dir` when it serves another folder (docs/serving.md)."""
    from pipeline.policy.model_ref import resolve_model_dir

    require_model(Path(model_dir))
    weights = resolve_model_dir(model_dir)
    url = os.environ.get(SGLANG_URL_ENV, "").strip()
    if url:
        from pipeline.policy.sglang_backend import SGLangBackend

        backend = SGLangBackend(url, weights)
        backend.ensure_weights(weights)
        return backend
    import torch

    if torch.cuda.is_available():
        from pipeline.policy.hf_backend import HFBackend

        return HFBackend(str(weights), device="cuda", dtype=torch.bfloat16)
    from pipeline.engine.backend import EngineBackend

    return EngineBackend(str(weights), config=engine_config(engine))
