"""Giving freed memory back to the system.

A stage allocates and frees tensors of a different size at nearly every engine step (row counts,
prefill lengths); glibc keeps most of what is freed in its heap, fragmented, so a process's
resident memory crept up by a gigabyte over a training stage although what it held stayed the
same (docs/profile.md#memory). `malloc_trim` hands the free pages back; elsewhere than glibc it
does nothing. oneDNN, besides, keeps a compiled kernel for every matmul shape it has seen (1,024
by default), and the engine's row counts change every step: those kernels grew a stage's memory
by 0.3-0.5 GB.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import os
from functools import cache

ONEDNN_KERNELS_KEPT = 256


@cache
def _libc():
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name) if name else None
    except OSError:
        return None
    return libc if libc is not None and hasattr(libc, "malloc_trim") else None


def give_back() -> None:
    """Return the heap's free pages to the system (glibc's malloc_trim); a no-op elsewhere."""
    libc = _libc()
    if libc is not None:
        libc.malloc_trim(0)


def cap_kernel_cache() -> None:
    """Keep at most ONEDNN_KERNELS_KEPT compiled oneDNN kernels unless the environment says
    otherwise. oneDNN reads the setting when the process's first bfloat16 matmul runs: call this
    before that."""
    os.environ.setdefault("ONEDNN_PRIMITIVE_CACHE_CAPACITY", str(ONEDNN_KERNELS_KEPT))
