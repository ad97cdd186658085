"""A KV cache that decodes in place: each layer's keys and values live in buffers sized for the
whole generation, and a decode step writes its token into them instead of growing them.

transformers' DynamicLayer concatenates every step, copying the whole cache: on a tiny model
on CPU that copy, not the model, was most of a decode step (148 ms of a 256-row step at 300
tokens of context; 36 ms in place, benchmarks/bench_generation.py).
"""

from __future__ import annotations

import torch
from transformers.cache_utils import DynamicLayer


class PreallocatedLayer(DynamicLayer):
    """One layer's cache in (batch, heads, capacity, head_dim) buffers whose first `length`
    positions are filled; `keys`/`values` are views of the filled part, as DynamicLayer's tensors are."""

    def __init__(self, keys: torch.Tensor, values: torch.Tensor, length: int):
        super().__init__()
        if keys.shape != values.shape or length > keys.shape[2]:
            raise ValueError(f"buffers {tuple(keys.shape)}, {tuple(values.shape)} cannot hold {length} positions")
        self._keys, self._values, self.length = keys, values, length
        self.dtype, self.device, self.is_initialized = keys.dtype, keys.device, True
        self._views()

    @classmethod
    def copy_of(cls, keys: torch.Tensor, values: torch.Tensor, capacity: int) -> PreallocatedLayer:
        """A layer holding a copy of filled `keys`/`values`, with room up to `capacity` positions."""
        batch, heads, length, dim = keys.shape
        if capacity < length:
            raise ValueError(f"capacity {capacity} < the {length} positions already cached")
        key_buffer = keys.new_empty((batch, heads, capacity, dim))
        value_buffer = values.new_empty((batch, heads, capacity, dim))
        key_buffer[:, :, :length] = keys
        value_buffer[:, :, :length] = values
        return cls(key_buffer, value_buffer, length)

    def _views(self) -> None:
        self.keys = self._keys[:, :, : self.length]
        self.values = self._values[:, :, : self.length]

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        new = key_states.shape[-2]
        if self.length + new > self._keys.shape[2]:
            raise RuntimeError(f"KV cache full: {self.length} + {new} > capacity {self._keys.shape[2]}")
        self._keys[:, :, self.length : self.length + new] = key_states
        self._values[:, :, self.length : self.length + new] = value_states
        self.length += new
        self._views()
        return self.keys, self.values

    def get_seq_length(self) -> int:
        return self.length

    def batch_select_indices(self, indices: torch.Tensor) -> None:
        """Keep the rows `indices`, in place when they ascend (as a generation's finished rows
        leave): each kept row moves up in the same buffers, so dropping rows allocates nothing."""
        keep = indices.tolist()
        if any(b <= a for a, b in zip(keep, keep[1:])):
            self._keys, self._values = self._keys[indices], self._values[indices]
        else:
            for row, source in enumerate(keep):  # source >= row, and no later row reads a row written here
                if source != row:
                    self._keys[row] = self._keys[source]
                    self._values[row] = self._values[source]
            self._keys, self._values = self._keys[: len(keep)], self._values[: len(keep)]
        self._views()

