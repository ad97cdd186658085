"""Whether this CPU computes bfloat16 natively, and the settings that follow from it.

bfloat16 pays on CPUs with AMX tiles or AVX512-BF16 units (the tiny base model trains ~1.6x
faster, E5 encodes a batch ~3x faster than in float32). Elsewhere (an AVX2-only CPU) torch
emulates it: correct, but ~14x slower than float32 per training step. `auto` settings take
bfloat16 only where it is native, so a fresh clone's `make repro` keeps its speed on either
kind of CPU; the two kinds then train from different floats, and the stages log which they used.
"""

from __future__ import annotations

from typing import Literal

AUTO = "auto"
Bf16Setting = bool | Literal["auto"]


def cpu_has_native_bf16() -> bool:
    """True on a CPU with AMX tiles or AVX512-BF16 (torch's own checks); False otherwise or when
    this torch cannot tell."""
    import torch

    checks = (getattr(torch.cpu, "_is_amx_tile_supported", None), getattr(torch.cpu, "_is_avx512_bf16_supported", None))
    return any(bool(check()) for check in checks if check is not None)


def resolve_bf16(setting: Bf16Setting) -> bool:
    """`auto` -> whether this CPU has native bfloat16; True / False as given."""
    return cpu_has_native_bf16() if setting == AUTO else bool(setting)
