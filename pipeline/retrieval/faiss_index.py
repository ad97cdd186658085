"""faiss objects for an IndexSpec: creation, training, GPU placement and search settings.

The GPU paths run only where faiss-gpu sees a device (the GPU image); elsewhere every
function works on the CPU index it is given.
"""

from __future__ import annotations

from typing import Any

import faiss
import numpy as np

from pipeline.retrieval.index_spec import IndexSpec


def use_gpu() -> bool:
    return hasattr(faiss, "get_num_gpus") and faiss.get_num_gpus() > 0


def new_index(spec: IndexSpec, dim: int) -> Any:
    """An empty inner-product index of `spec`'s kind (flat: IndexFlatIP, as always)."""
    if spec.kind == "flat":
        return faiss.IndexFlatIP(dim)
    return faiss.index_factory(dim, spec.factory(), faiss.METRIC_INNER_PRODUCT)


def _cloner_options(fp16: bool, shard: bool) -> Any:
    options = faiss.GpuMultipleClonerOptions()
    options.shard = shard
    options.useFloat16 = fp16
    return options


def to_build_device(index: Any) -> Any:
    """IVF assignment of millions of vectors is GPU work: the index to train and fill (a GPU
    copy when faiss-gpu sees a device; bring it back with `to_cpu`)."""
    if not use_gpu() or isinstance(index, faiss.IndexFlat):
        return index
    return faiss.index_cpu_to_all_gpus(index, co=_cloner_options(fp16=False, shard=False))


def to_cpu(built: Any, original: Any) -> Any:
    return original if built is original else faiss.index_gpu_to_cpu(built)


def train(index: Any, vectors: np.ndarray) -> None:
    if not index.is_trained:
        index.train(np.ascontiguousarray(vectors, dtype=np.float32))


def set_nprobe(index: Any, nprobe: int, on_gpu: bool = False) -> None:
    """Cells scanned per query (IVF kinds), on a CPU index or on one moved to the GPUs."""
    space = faiss.GpuParameterSpace() if on_gpu else faiss.ParameterSpace()
    space.set_index_parameter(index, "nprobe", int(nprobe))


def nprobe_of(index: Any) -> int | None:
    try:
        return int(faiss.extract_index_ivf(index).nprobe)
    except (RuntimeError, AttributeError):
        return None


def to_search_device(index: Any, fp16: bool = False) -> Any:
    """Move a CPU index onto all GPUs (sharded; vectors in float16 when `fp16`) when faiss-gpu
    sees any; otherwise unchanged. The IVF nprobe is carried over."""
    if not use_gpu():
        return index
    nprobe = nprobe_of(index)
    moved = faiss.index_cpu_to_all_gpus(index, co=_cloner_options(fp16=fp16, shard=True))
    if nprobe is not None:
        set_nprobe(moved, nprobe, on_gpu=True)
    return moved
