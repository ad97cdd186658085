"""Giving freed memory back to the system.

A stage allocates and frees tensors of a different size at nearly every engine step (row counts,
prefill lengths); glibc keeps most of what is freed in its heap, fragmented, so a process's
resident memory crept up by a gigabyte over a training stage although what it held stayed the
same (docs/profile.md#memory). `malloc_trim` hands the free pages back; elsewhere than glibc it
does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache


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
