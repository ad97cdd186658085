"""How many threads a stage computes with: `<profile>.threads` of params.yaml, whatever the shell
exports.

Reductions split by thread count (a gradient norm, a weight-gradient GEMM over thousands of
tokens, an attention sum), so the thread count is part of what a stage computes: the same code,
inputs and CPU kind with other threads give other floats. Every stage therefore sets torch's,
OpenMP's, MKL's and faiss's thread counts from the profile before it computes, ignoring
OMP_NUM_THREADS and MKL_NUM_THREADS. `MAOPD_THREADS` asks for another count for one command; such
a run is another draw: its MLflow runs and its draw record say so (pipeline.draws.identity).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from pipeline.errors import ConfigError

THREADS_ENV = "MAOPD_THREADS"
_LIBRARY_ENV = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


def requested_threads(profile_threads: int, environ: Mapping[str, str] = os.environ) -> int:
    """The profile's thread count, or MAOPD_THREADS when it is set."""
    raw = environ.get(THREADS_ENV, "").strip()
    if not raw:
        return int(profile_threads)
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value < 1:
        raise ConfigError(f"{THREADS_ENV}={raw!r}: expected a whole number of threads >= 1")
    return value


def use_threads(threads: int) -> int:
    """Compute with `threads` threads in this process and the processes it starts; returns it."""
    for name in _LIBRARY_ENV:  # read when a library loads: for anything loaded later and for children
        os.environ[name] = str(threads)
    import torch

    torch.set_num_threads(threads)  # torch's pool, OpenMP's and MKL's in this thread
    try:
        import faiss
    except ImportError:  # the stages that search need faiss; the others run without it
        return threads
    faiss.omp_set_num_threads(threads)
    return threads

