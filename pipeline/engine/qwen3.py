"""Qwen3's forward pass as plain tensor functions over packed tokens, for the engine and the packed trainer.

transformers' modules pad every batch to a rectangle and run tens of small kernels per layer
through Python module calls; on a 1.5M-parameter model on CPU that dispatch, not arithmetic,
is most of a decode step (docs/profile.md). Here every linear layer runs once on all tokens of a
step, packed as (tokens, hidden) with no padding, with q/k/v and gate/up fused into one matmul
each, and attention is a callback that knows where each token's keys live (the engine's KV
pool, or one packed training sequence). The weights are the Hugging Face module's own
parameters: a trainer's updates are seen at the next call (`Qwen3Weights.current`).

The maths is transformers' Qwen3 (RMSNorm in float32, q/k RMSNorm per head, rotary
embeddings with rotate-half, SwiGLU, tied or untied output layer); floating-point sums differ
from it in the last bits (other kernels and shapes), which tests bound per token log-prob.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from pipeline.errors import InputError

# attention(layer, q (T, Hq, d), k (T, Hkv, d), v (T, Hkv, d)) -> (T, Hq * d)
Attention = Callable[[int, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


@dataclass(frozen=True)
class Shape:
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    vocab: int
    max_positions: int
    eps: float

    @property
    def kv_floats_per_token(self) -> int:
        """Keys and values of one position over all layers."""
        return 2 * self.layers * self.kv_heads * self.head_dim


@dataclass
class LayerWeights:
    ln_attn: torch.Tensor
    qkv: torch.Tensor  # (Hq*d + 2*Hkv*d, hidden)
    qk_norm: torch.Tensor  # (Hq + Hkv, d): q_norm's weight for each query head, k_norm's for each key head
    o: torch.Tensor
    ln_mlp: torch.Tensor
    gate_up: torch.Tensor  # (2 * intermediate, hidden)
    down: torch.Tensor


MATMULS = ("qkv", "o", "gate_up", "down")  # the LayerWeights that a bf16 engine keeps in bfloat16


def model_shape(model: torch.nn.Module) -> Shape:
    config = model.config
    if getattr(config, "model_type", "") != "qwen3":
        raise InputError(f"engine: expected a Qwen3 model (config.model_type 'qwen3'), got {config.model_type!r}")
    rope = getattr(config, "rope_parameters", None) or {"rope_type": "default"}
    if rope.get("rope_type", "default") != "default":
        raise InputError(f"engine: rope_type {rope.get('rope_type')!r} is not supported (only 'default')")
    if getattr(config, "attention_bias", False):
        raise InputError("engine: attention_bias models are not supported")
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    return Shape(config.hidden_size, config.num_hidden_layers, config.num_attention_heads,
                 config.num_key_value_heads, head_dim, config.intermediate_size, config.vocab_size,
                 config.max_position_embeddings, float(config.rms_norm_eps))


class Qwen3Weights:
    """The parameters of a transformers Qwen3ForCausalLM, fused for the packed forward.

    `current()` returns inference weights, re-fused (a copy, no autograd) whenever a parameter
    changed since the last call (an optimizer step or a load bumps its version counter), with the
    linear layers in `matmul_dtype` (bfloat16: the CPU's bf16 units; the norms, the residual
    stream and the output layer stay float32); `trainable()` fuses inside autograd, in the
    parameters' own dtype, so gradients reach the module's parameters."""

    def __init__(self, model: torch.nn.Module, matmul_dtype: torch.dtype | None = None):
        self.model = model
        self.matmul_dtype = matmul_dtype
        self.shape = model_shape(model)
        inner = model.model
        self.embed = inner.embed_tokens.weight
        self.norm = inner.norm.weight
        self.lm_head = model.lm_head.weight
        self.layer_modules = list(inner.layers)
        rope = getattr(model.config, "rope_parameters", None) or {}
        theta = float(rope.get("rope_theta", getattr(model.config, "rope_theta", 10000.0)))
        d = self.shape.head_dim
        inv_freq = 1.0 / (theta ** (torch.arange(0, d, 2, dtype=torch.int64).float() / d))
        positions = torch.arange(self.shape.max_positions, dtype=torch.float32)
        freqs = positions[:, None] * inv_freq[None, :]
        emb = torch.cat([freqs, freqs], dim=-1)
        self.cos = emb.cos()  # (max_positions, d), float32 as transformers computes them
        sin = emb.sin()
        self.signed_sin = torch.cat([-sin[:, : d // 2], sin[:, d // 2:]], dim=-1)  # for rotate()
        self._params = list(model.parameters())
        self._stamp: tuple | None = None
        self._fused: list[LayerWeights] = []

    def _stamp_now(self) -> tuple:
        return tuple((p.data_ptr(), p._version) for p in self._params)

    def _fuse(self) -> list[LayerWeights]:
        out = []
        s = self.shape
        for layer in self.layer_modules:
            attn, mlp = layer.self_attn, layer.mlp
            qk_norm = torch.cat([attn.q_norm.weight.expand(s.heads, -1), attn.k_norm.weight.expand(s.kv_heads, -1)])
            out.append(LayerWeights(
                ln_attn=layer.input_layernorm.weight,
                qkv=torch.cat([attn.q_proj.weight, attn.k_proj.weight, attn.v_proj.weight]),
                qk_norm=qk_norm, o=attn.o_proj.weight,
                ln_mlp=layer.post_attention_layernorm.weight,
                gate_up=torch.cat([mlp.gate_proj.weight, mlp.up_proj.weight]), down=mlp.down_proj.weight,
            ))
        return out

    def current(self) -> list[LayerWeights]:
        """Fused inference weights of the parameters as they are now."""
        stamp = self._stamp_now()
        if stamp != self._stamp:
            with torch.no_grad():
                cast = self.matmul_dtype or self.embed.dtype
                self._fused = [LayerWeights(**{k: v.detach().to(cast) if k in MATMULS else v.detach()
                                               for k, v in vars(w).items()}) for w in self._fuse()]
            self._stamp = stamp
        return self._fused

    @property
    def version(self) -> tuple:
        """Changes whenever any parameter does: cached keys and values of another version are stale."""
        return self._stamp_now()

    def trainable(self) -> list[LayerWeights]:
        return self._fuse()

    def to(self, device: torch.device) -> Qwen3Weights:
        self.cos, self.signed_sin = self.cos.to(device), self.signed_sin.to(device)
        return self


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """transformers' Qwen3RMSNorm (statistics in float32, the weight applied after), as one kernel."""
    if x.dtype != torch.float32:
        return weight * F.rms_norm(x.float(), (x.shape[-1],), None, eps).to(x.dtype)
    return F.rms_norm(x, (x.shape[-1],), weight, eps)


def rotate(x: torch.Tensor, cos: torch.Tensor, signed_sin: torch.Tensor) -> torch.Tensor:
    """Rotary embedding of x (T, H, d) with rotate-half: x cos + [-x2, x1] sin, written as
    x cos + roll(x, d/2) [-sin1, sin2]; cos and signed_sin are (T, 1, d)."""
    return torch.addcmul(x * cos, x.roll(x.shape[-1] // 2, dims=-1), signed_sin)


def forward_hidden(weights: Qwen3Weights, layers: list[LayerWeights], ids: torch.Tensor,
                   positions: torch.Tensor, attention: Attention) -> torch.Tensor:
    """Final hidden states (T, hidden), after the last norm, of packed tokens `ids` (T,) at
    `positions` (T,); `attention` places each layer's keys and values and attends. The linear
    layers, keys, values and attention run in the dtype of the layers' matmul weights; the
    residual stream and the norms' statistics in the embedding's."""
    s = weights.shape
    x = F.embedding(ids, weights.embed)
    cos = weights.cos[positions][:, None, :].to(x.dtype)
    sin = weights.signed_sin[positions][:, None, :].to(x.dtype)
    qk_width = (s.heads + s.kv_heads) * s.head_dim
    for index, w in enumerate(layers):
        mm = w.qkv.dtype
        h = rms_norm(x, w.ln_attn, s.eps).to(mm)
        qk, v = F.linear(h, w.qkv).split([qk_width, s.kv_heads * s.head_dim], dim=-1)
        # q_norm and k_norm in one kernel over all heads, then one rotary pass
        qk = qk.view(-1, s.heads + s.kv_heads, s.head_dim).to(x.dtype)
        qk = rotate(F.rms_norm(qk, (s.head_dim,), None, s.eps) * w.qk_norm, cos, sin).to(mm)
        q, k = qk.split([s.heads, s.kv_heads], dim=1)
        x = x + F.linear(attention(index, q, k, v.view(-1, s.kv_heads, s.head_dim)), w.o).to(x.dtype)
        h = rms_norm(x, w.ln_mlp, s.eps).to(mm)
        gate, up = F.linear(h, w.gate_up).chunk(2, dim=-1)
        x = x + F.linear(F.silu(gate) * up, w.down).to(x.dtype)
    return rms_norm(x, weights.norm, s.eps)


def logits_of(weights: Qwen3Weights, hidden: torch.Tensor) -> torch.Tensor:
    return F.linear(hidden, weights.lm_head)
