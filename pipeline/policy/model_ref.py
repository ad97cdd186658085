"""A reference to an existing local model folder instead of a copy of its weights.

The paper profile does not train a base model: `base_model` checks the local
Qwen3-4B-Instruct-2507 folder, hashes it and writes `data/models/base/model_ref.json`
{path, sha256, files, source}. `path` is relative to the folder holding the json (so the
repository can move); `source` is the path as written in params.yaml. Every loader
calls `resolve_model_dir`, which accepts either kind of folder.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from pipeline.errors import InputError
from pipeline.io import atomic_dir, hash_files

MODEL_REF = "model_ref.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "vocab.json")


def model_files(folder: str | os.PathLike) -> list[str]:
    """The files of a HF model folder (relative names, sorted); InputError naming what is
    missing when it lacks config.json, a tokenizer file or *.safetensors weights."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: expected a local model folder, found none")
    files = sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() and not p.name.startswith("."))
    missing = []
    if "config.json" not in files:
        missing.append("config.json")
    if not any(name in files for name in TOKENIZER_FILES):
        missing.append(f"a tokenizer file ({', '.join(TOKENIZER_FILES)})")
    if not any(name.endswith(".safetensors") for name in files):
        missing.append("*.safetensors weights")
    if missing:
        raise InputError(f"{folder}: not a usable model folder; missing {'; '.join(missing)}")
    return files


def write_model_ref(model_dir: str | os.PathLike, out_dir: str | os.PathLike, source: str = "") -> dict:
    """Check and hash `model_dir`, then write `out_dir/model_ref.json` (out_dir replaced whole)."""
    model_dir, out_dir = Path(model_dir).resolve(), Path(out_dir)
    files = model_files(model_dir)
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    ref = {
        "path": os.path.relpath(model_dir, out_dir.resolve()),
        "source": source or str(model_dir),
        "sha256": hash_files(model_dir, files),
        "files": files,
    }
    with atomic_dir(out_dir) as tmp:
        (tmp / MODEL_REF).write_text(json.dumps(ref, indent=2, sort_keys=True) + "\n")
    return ref


def resolve_model_dir(path: str | os.PathLike, verify: bool = False) -> Path:
    """The folder holding the weights: `path` itself when it has config.json, else the
    folder its model_ref.json points to. `verify` re-hashes it against the reference."""
    path = Path(path)
    if (path / "config.json").is_file():
        return path
    ref_file = path / MODEL_REF
    if not ref_file.is_file():
        raise InputError(f"{path}: expected a model folder (config.json) or a {MODEL_REF}, found neither")
    try:
        ref = json.loads(ref_file.read_text())
        target = (path / ref["path"]).resolve()
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"{ref_file}: expected JSON with field 'path': {exc}") from exc
    if not (target / "config.json").is_file():
        raise InputError(f"{ref_file}: field 'path' points to {target}, which has no config.json")
    if verify:
        got = hash_files(target, model_files(target))
        if got != ref.get("sha256"):
            raise InputError(f"{ref_file}: {target} changed since it was referenced "
                             f"(sha256 {got} != {ref.get('sha256')})")
    return target
