"""Hand freed heap memory back to the OS.

Training on batches of changing shapes leaves glibc's heap holding freed blocks: on the
tiny profile's SFT, resident memory grew from ~1.9 to ~2.3 GB in 400 steps and kept growing
with the step count; `malloc_trim` every 100 steps kept it at ~1.3 GB at no measurable
cost. A no-op where the C library is not glibc.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools


@functools.cache
def _malloc_trim():
    name = ctypes.util.find_library("c")
    try:
        return ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None


def trim_heap() -> bool:
    """Return freed heap memory to the OS; True if the C library did so."""
    trim = _malloc_trim()
    return bool(trim(0)) if trim is not None else False
