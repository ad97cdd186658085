"""Resumable training checkpoints: `<checkpoint_dir>/step-XXXX/`, written atomically.

A checkpoint folder (format 3) holds
  - the HF folder of the weights (config.json, model.safetensors, tokenizer files);
  - `checkpoint.json`: format, completed steps, the run's fingerprint (a checkpoint of a run
    with other numbers or inputs is never resumed), the metric history logged up to this step
    and the caller's `meta` (the training stage keeps its MLflow run id there);
  - `trainer_state.pt`: the optimizer state and the torch (CPU and CUDA), numpy and python RNG
    states as tensors and plain numbers, so it loads with `torch.load(weights_only=True)` and
    no pickled code ever runs;
  - `run_state.pt`: the caller's run state (pipeline.rl.run_state: the retriever's memory and
    the engines' prefix caches), loaded the same way.
The last `keep` checkpoints are kept. A folder appears only once complete, so a run killed
mid-write resumes from the previous one. A checkpoint that cannot be read (damaged file, an
older format) is skipped with a warning naming it, and the newest readable one is resumed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import random
import re
import shutil
import zipfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from pipeline.io import atomic_dir, recover_interrupted_in

FORMAT = 3
META_FILE = "checkpoint.json"
STATE_FILE = "trainer_state.pt"
RUN_STATE_FILE = "run_state.pt"
_STEP_DIR = re.compile(r"^step-(\d{4,})$")

log = logging.getLogger(__name__)


class UnreadableCheckpoint(Exception):
    """A checkpoint folder that cannot be resumed; the message says why."""


@dataclass
class Checkpoint:
    """What a readable checkpoint says about itself (its weights and states stay on disk)."""

    step: int  # completed steps
    path: Path
    fingerprint: str
    history: list[dict] = field(default_factory=list)  # {"step": s, **metrics}, as logged
    meta: dict[str, str] = field(default_factory=dict)
    run_state: dict[str, Any] = field(default_factory=dict)  # filled by load_latest


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:04d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Checkpoint folders under `root` (readable or not), oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and child.is_dir():
            found.append((int(m.group(1)), child))
    return sorted(found)


def _rng_state() -> dict[str, Any]:
    name, keys, pos, has_gauss, cached = np.random.get_state()
    version, internal, gauss_next = random.getstate()
    return {
        "torch": torch.get_rng_state(),
        "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "numpy": [name, [int(k) for k in keys], int(pos), int(has_gauss), float(cached)],
        "python": [version, list(internal), gauss_next],
    }


def _set_rng_state(rng: dict[str, Any]) -> None:
    torch.set_rng_state(rng["torch"])
    if rng["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(rng["cuda"])
    name, keys, pos, has_gauss, cached = rng["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, cached))
    version, internal, gauss_next = rng["python"]
    random.setstate((version, tuple(internal), gauss_next))


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    fingerprint: str,
    keep: int = 2,
    history: Sequence[dict] = (),
    meta: dict[str, str] | None = None,
    run_state: dict[str, Any] | None = None,
) -> Path:
    """Write step-XXXX atomically, then delete all but the newest `keep` checkpoints."""
    path = step_dir(root, step)
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        torch.save({"optimizer": optimizer.state_dict(), "rng": _rng_state()}, tmp / STATE_FILE)
        torch.save(dict(run_state or {}), tmp / RUN_STATE_FILE)
        record = {"format": FORMAT, "step": step, "fingerprint": fingerprint, "meta": dict(meta or {}),
                  "history": list(history)}
        (tmp / META_FILE).write_text(json.dumps(record, indent=1) + "\n")
    for _, old in list_checkpoints(root)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return path


def inputs_fingerprint(model_dirs: list[Path], question_ids: list[list[str]]) -> str:
    """What a run starts from: the weights it loads (a model_ref.json stands for the folder it
    hashes) and its questions. A checkpoint of other inputs (a retrained base model, new
    splits) is never resumed."""
    from pipeline.policy.model_ref import MODEL_REF, hash_files

    digest = hashlib.sha256()
    for folder in model_dirs:
        folder = Path(folder)
        if (folder / MODEL_REF).is_file():
            digest.update((folder / MODEL_REF).read_bytes())
        else:
            files = sorted(p.name for p in folder.iterdir() if p.is_file())
            digest.update(hash_files(folder, files).encode())
    for ids in question_ids:
        digest.update("\0".join(map(str, ids)).encode() + b"\1")
    return digest.hexdigest()[:16]


def _check_safetensors(path: Path) -> None:
    from safetensors import safe_open

    with safe_open(str(path), "pt") as f:  # fails unless the header parses and the data covers the file
        f.keys()


def read_checkpoint(path: Path) -> Checkpoint:
    """The record of one checkpoint folder after checking that every file can be read: the
    JSON files parse, the state archive's CRCs match, the safetensors files are complete.
    Raises UnreadableCheckpoint saying what is wrong."""
    path = Path(path)
    try:
        record = json.loads((path / META_FILE).read_text())
    except FileNotFoundError:
        what = "an older checkpoint format" if (path / STATE_FILE).is_file() else "an incomplete folder"
        raise UnreadableCheckpoint(f"{path}: no {META_FILE} ({what})") from None
    except (OSError, ValueError) as e:
        raise UnreadableCheckpoint(f"{path / META_FILE}: not readable JSON ({e})") from None
    found = record.get("format") if isinstance(record, dict) else None
    if found != FORMAT:
        raise UnreadableCheckpoint(f"{path / META_FILE}: format {found}; expected {FORMAT}")
    try:
        json.loads((path / "config.json").read_text())
    except (OSError, ValueError) as e:
        raise UnreadableCheckpoint(f"{path / 'config.json'}: not readable ({e})") from None
    for name in (STATE_FILE, RUN_STATE_FILE):
        try:
            with zipfile.ZipFile(path / name) as archive:
                bad = archive.testzip()
            if bad is not None:
                raise UnreadableCheckpoint(f"{path / name}: member {bad} fails its CRC check")
        except (OSError, zipfile.BadZipFile) as e:
            raise UnreadableCheckpoint(f"{path / name}: not a readable torch archive ({e})") from None
    weights = sorted(path.glob("*.safetensors"))
    if not weights:
        raise UnreadableCheckpoint(f"{path}: no *.safetensors weights")
    for file in weights:
        try:
            _check_safetensors(file)
        except Exception as e:  # safetensors raises its own error type for damaged files
            raise UnreadableCheckpoint(f"{file}: not a complete safetensors file ({e})") from None
    try:
        return Checkpoint(step=int(record["step"]), path=path, fingerprint=str(record["fingerprint"]),
                          history=list(record.get("history", [])), meta=dict(record.get("meta", {})))
    except (KeyError, TypeError, ValueError) as e:
        raise UnreadableCheckpoint(f"{path / META_FILE}: bad record ({e})") from None


def _readable(root: Path, fingerprint: str) -> Iterator[Checkpoint]:
    """Readable checkpoints of the run `fingerprint`, newest first; each unreadable one is
    reported with a warning. Leftovers of a write cut by a kill are cleaned first."""
    recover_interrupted_in(root)
    for _, path in reversed(list_checkpoints(root)):
        try:
            ckpt = read_checkpoint(path)
        except UnreadableCheckpoint as e:
            log.warning("skipping unreadable checkpoint: %s", e)
            continue
        if ckpt.fingerprint == fingerprint:
            yield ckpt


def find_latest(root: Path, fingerprint: str) -> Checkpoint | None:
    """The checkpoint load_latest would resume (without loading its weights or states)."""
    return next(_readable(root, fingerprint), None)


def load_latest(
    root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, fingerprint: str
) -> Checkpoint | None:
    """Restore weights, optimizer and RNG states from the newest readable matching checkpoint,
    if any (an older one when a newer fails to load, with a warning naming it); the checkpoint's
    run state is in its `run_state`, for the caller to restore."""
    for ckpt in _readable(root, fingerprint):
        try:
            state: dict[str, Any] = torch.load(ckpt.path / STATE_FILE, weights_only=True)
            dtype = next(model.parameters()).dtype
            saved = AutoModelForCausalLM.from_pretrained(ckpt.path, local_files_only=True, dtype=dtype)
            weights = saved.state_dict()
            optimizer_state, rng = state["optimizer"], state["rng"]
            ckpt.run_state = torch.load(ckpt.path / RUN_STATE_FILE, weights_only=True)
        except Exception as e:  # torch, safetensors and transformers each raise their own types
            log.warning("skipping unreadable checkpoint: %s: %s: %s", ckpt.path, type(e).__name__, e)
            continue
        with torch.no_grad():
            model.load_state_dict(weights)
        optimizer.load_state_dict(optimizer_state)
        _set_rng_state(rng)
        return ckpt
    return None
