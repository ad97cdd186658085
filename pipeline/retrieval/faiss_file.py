"""faiss index files opened with an InputError naming the file when they cannot be read.

faiss reads a memory-mapped file without checking its length: a truncated flat index crashes
the process (SIGSEGV) instead of raising. So a prebuilt index, which is memory-mapped, is
checked first from its header: its kind (the four-byte code faiss writes first) must be a flat
inner-product index, and its size the one its vector count and dimension imply. Other kinds
are refused by name: an HNSW or IVF index is approximate, its recall set by search parameters
(efSearch, nprobe) that serving a prebuilt file does not carry, and HNSW has no GPU version.
"""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any

import faiss

from pipeline.errors import InputError

FLAT_IP = b"IxFI"
KINDS = {b"IxFI": "IndexFlatIP", b"IxF2": "IndexFlatL2", b"IxFl": "IndexFlat", b"IHNf": "IndexHNSWFlat",
         b"IHNp": "IndexHNSWPQ", b"IHNs": "IndexHNSWSQ", b"IwFl": "IndexIVFFlat", b"IwPQ": "IndexIVFPQ",
         b"IwSq": "IndexIVFScalarQuantizer", b"IxSQ": "IndexScalarQuantizer", b"IxPq": "IndexPQ",
         b"IxMp": "IndexIDMap", b"IxM2": "IndexIDMap2", b"IxPT": "IndexPreTransform"}
# fourcc, d, ntotal, two placeholders, is_trained, metric; then the count of floats stored
FLAT_HEADER = struct.Struct("<4siqqq?iQ")


def _reason(err: BaseException, path: Path) -> str:
    """faiss's message without its C++ location, path and errno text: "read error: 955 != 2048"."""
    text = (str(err).splitlines() or [type(err).__name__])[0]
    text = text.split(" failed: ", 1)[-1].replace(f" in {path}", "")
    return re.sub(r" \([^()]*\)$", "", text)[:200]


def check_flat_ip_file(path: Path) -> None:
    """InputError unless `path` is a complete IndexFlatIP file (read from its header only)."""
    with path.open("rb") as handle:
        head = handle.read(FLAT_HEADER.size)
    kind = KINDS.get(head[:4])
    if kind is None:
        raise InputError(f"{path}: not a readable faiss index (it starts with {head[:8]!r}; a flat "
                         f"inner-product index starts with {FLAT_IP!r})")
    if head[:4] in (b"IxF2", b"IxFl"):
        raise InputError(f"{path}: an {kind}, whose metric is not inner product; E5 indexes score by inner "
                         f"product (IndexFlatIP, as Search-R1's e5_Flat.index)")
    if head[:4] != FLAT_IP:
        raise InputError(f"{path}: an {kind}; a prebuilt index is served only when flat with inner product "
                         f"(IndexFlatIP, as Search-R1's e5_Flat.index): HNSW and IVF kinds are approximate, "
                         f"with search settings a prebuilt file does not carry")
    if len(head) < FLAT_HEADER.size:
        raise InputError(f"{path}: not a readable faiss index (only {len(head)} bytes; cut short?)")
    _, dim, count, _, _, _, _, floats = FLAT_HEADER.unpack(head)
    expected = FLAT_HEADER.size + 4 * count * dim
    size = path.stat().st_size
    if dim < 1 or count < 0 or floats != count * dim or size != expected:
        raise InputError(f"{path}: not a readable faiss index: its header says {count} vectors of dimension {dim} "
                         f"({expected} bytes), the file has {size} bytes (cut short or damaged?)")


def read_faiss_index(path: str | Path) -> Any:
    """Any faiss index file, read into memory."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: faiss index file not found")
    try:
        return faiss.read_index(str(path))
    except (RuntimeError, MemoryError) as err:
        raise InputError(f"{path}: not a readable faiss index ({_reason(err, path)})") from None


def read_flat_ip_index(path: str | Path, mmap: bool = True) -> Any:
    """A flat inner-product index file (checked first: check_flat_ip_file), memory-mapped
    when `mmap` (a 21M x 768 float32 flat index is 64 GB: pages are read as searches touch
    them, not copied at start)."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: faiss index file not found")
    check_flat_ip_file(path)
    try:
        return faiss.read_index(str(path), faiss.IO_FLAG_MMAP_IFC if mmap else 0)
    except (RuntimeError, MemoryError) as err:
        raise InputError(f"{path}: not a readable faiss index ({_reason(err, path)})") from None
