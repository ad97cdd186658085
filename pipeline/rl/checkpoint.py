"""Resumable training checkpoints: `<checkpoint_dir>/step-XXXX/`, written atomically.

Each holds an HF folder (config, safetensors, tokenizer) and `trainer_state.pt` with the
optimizer state, the torch / numpy / python RNG states, the number of completed steps and
the run's fingerprint (a checkpoint of a run with other numbers is never resumed). The last
`keep` checkpoints are kept. A checkpoint folder appears only once complete, so a run
killed mid-write resumes from the previous one.
"""

from __future__ import annotations

import hashlib
import random
import re
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from transformers import AutoModelForCausalLM, PreTrainedTokenizerBase

from pipeline.io import atomic_dir

STATE_FILE = "trainer_state.pt"
_STEP_DIR = re.compile(r"^step-(\d{4,})$")


@dataclass
class Resumed:
    step: int  # completed steps
    path: Path


def step_dir(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step:04d}"


def list_checkpoints(root: Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under `root`, oldest first."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        m = _STEP_DIR.match(child.name)
        if m and (child / STATE_FILE).is_file():
            found.append((int(m.group(1)), child))
    return sorted(found)


def save_checkpoint(
    root: Path,
    step: int,
    model: torch.nn.Module,
    tokenizer: PreTrainedTokenizerBase,
    optimizer: torch.optim.Optimizer,
    fingerprint: str,
    keep: int = 2,
) -> Path:
    """Write step-XXXX atomically, then delete all but the newest `keep` checkpoints."""
    path = step_dir(root, step)
    with atomic_dir(path) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
        torch.save(
            {
                "step": step,
                "fingerprint": fingerprint,
                "optimizer": optimizer.state_dict(),
                "rng_torch": torch.get_rng_state(),
                "rng_numpy": np.random.get_state(),
                "rng_python": random.getstate(),
            },
            tmp / STATE_FILE,
        )
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


def load_latest(
    root: Path, model: torch.nn.Module, optimizer: torch.optim.Optimizer, fingerprint: str
) -> Resumed | None:
    """Restore weights, optimizer and RNG states from the newest matching checkpoint, if any.
    Leftovers of a write cut by a kill (hidden `.step-XXXX.*` folders) are removed."""
    if Path(root).is_dir():
        for child in Path(root).iterdir():
            if child.name.startswith(".step-") and child.is_dir():
                shutil.rmtree(child, ignore_errors=True)
    for step, path in reversed(list_checkpoints(root)):
        state: dict[str, Any] = torch.load(path / STATE_FILE, weights_only=False)
        if state.get("fingerprint") != fingerprint:
            continue
        dtype = next(model.parameters()).dtype
        saved = AutoModelForCausalLM.from_pretrained(path, local_files_only=True, dtype=dtype)
        with torch.no_grad():
            model.load_state_dict(saved.state_dict())
        optimizer.load_state_dict(state["optimizer"])
        torch.set_rng_state(state["rng_torch"])
        np.random.set_state(state["rng_numpy"])
        random.setstate(state["rng_python"])
        return Resumed(step=int(state["step"]), path=path)
    return None
