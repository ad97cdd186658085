"""How the passage index is built and searched (params `<profile>.index.*`).

flat   IndexFlatIP: exact inner product (the paper's choice; the default).
ivf    IndexIVFFlat: `nlist` k-means cells trained on a sample of the passages, `nprobe`
       cells scanned per query; exact scores inside the scanned cells.
ivfpq  IndexIVFPQ: as ivf, vectors compressed to `pq_m` codes of `pq_bits` bits.
`gpu_fp16`: with faiss-gpu, the GPU copy stores vectors (flat, ivf) in float16.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.errors import InputError

KINDS = ("flat", "ivf", "ivfpq")
# default training sample per cell: faiss warns below 39 and subsamples above 256 per cell
TRAIN_POINTS_PER_CELL = 64


@dataclass(frozen=True)
class IndexSpec:
    kind: str = "flat"
    nlist: int | None = None
    nprobe: int | None = None
    pq_m: int | None = None
    pq_bits: int = 8
    train_size: int | None = None  # passages sampled to train the cells (default: 64 * nlist)
    gpu_fp16: bool = False

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise InputError(f"index.kind: expected one of {', '.join(KINDS)}, got {self.kind!r}")
        if self.kind == "flat":
            for key in ("nlist", "nprobe", "pq_m", "train_size"):
                if getattr(self, key) is not None:
                    raise InputError(f"index.{key}: only used by kind ivf/ivfpq; remove it for kind flat")
            return
        for key in ("nlist", "nprobe"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise InputError(f"index.{key}: kind {self.kind} needs an integer >= 1, got {value!r}")
        if self.nprobe > self.nlist:
            raise InputError(f"index.nprobe: expected at most index.nlist ({self.nlist}), got {self.nprobe}")
        if self.train_size is not None and self.train_size < self.nlist:
            raise InputError(f"index.train_size: expected at least index.nlist ({self.nlist}) vectors, "
                             f"got {self.train_size}")
        if self.kind == "ivfpq":
            if not isinstance(self.pq_m, int) or self.pq_m < 1:
                raise InputError(f"index.pq_m: kind ivfpq needs an integer >= 1, got {self.pq_m!r}")
            if not 1 <= self.pq_bits <= 16:
                raise InputError(f"index.pq_bits: expected 1..16, got {self.pq_bits}")
        elif self.pq_m is not None:
            raise InputError("index.pq_m: only used by kind ivfpq")

    def train_count(self, count: int) -> int:
        """Vectors to train on for `count` passages (all of them when fewer)."""
        wanted = self.train_size if self.train_size is not None else TRAIN_POINTS_PER_CELL * (self.nlist or 1)
        return min(count, wanted)

    def check_data(self, count: int, dim: int) -> None:
        """What can only be checked against the corpus: InputError naming the key."""
        if self.kind == "flat":
            return
        if self.nlist > count:
            raise InputError(f"index.nlist: expected at most the number of passages ({count}), got {self.nlist}")
        if self.kind == "ivfpq":
            if dim % self.pq_m:
                raise InputError(f"index.pq_m: expected a divisor of the vector dimension {dim}, got {self.pq_m}")
            if self.train_count(count) < 2**self.pq_bits:
                raise InputError(f"index.pq_bits: {self.pq_bits} bits need {2**self.pq_bits} training vectors, "
                                 f"only {self.train_count(count)} available (index.train_size or passages)")

    def factory(self) -> str:
        """faiss.index_factory description (inner-product metric)."""
        if self.kind == "flat":
            return "Flat"
        if self.kind == "ivf":
            return f"IVF{self.nlist},Flat"
        return f"IVF{self.nlist},PQ{self.pq_m}x{self.pq_bits}"
