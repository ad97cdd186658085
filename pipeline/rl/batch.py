"""Tables <-> padded (n_samples, max_len) tensors, in a fixed sample order."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from pipeline.errors import InputError
from pipeline.rl.checks import require_columns


def _positions(tokens: pd.DataFrame, sample_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Row and column of every token in the padded matrix, and the padded length."""
    require_columns(tokens, ["sample_id", "pos"], "tokens")
    row_of = pd.Series(np.arange(len(sample_ids)), index=pd.Index(sample_ids, dtype=object))
    rows = tokens["sample_id"].map(row_of)
    if rows.isna().any():
        raise InputError(f"tokens.sample_id: {tokens['sample_id'][rows.isna()].iloc[0]!r} is not in the batch")
    cols = tokens["pos"].to_numpy(dtype=np.int64)
    if (cols < 0).any():
        raise InputError("tokens.pos: expected positions >= 0")
    width = int(cols.max()) + 1 if len(cols) else 0
    return rows.to_numpy(dtype=np.int64), cols, width


def pad_column(
    tokens: pd.DataFrame, sample_ids: np.ndarray, column: str, fill: float = 0.0, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """`tokens[column]` as a (len(sample_ids), max_pos + 1) tensor; absent positions hold `fill`."""
    rows, cols, width = _positions(tokens, sample_ids)
    out = np.full((len(sample_ids), width), fill, dtype=np.float64)
    out[rows, cols] = tokens[column].to_numpy(dtype=np.float64)
    return torch.as_tensor(out, dtype=dtype)


def last_token_rewards(
    tokens: pd.DataFrame, sample_ids: np.ndarray, rewards: np.ndarray, dtype: torch.dtype = torch.float64
) -> torch.Tensor:
    """verl's token_level_rewards: each sample's scalar reward on its last loss token (its last
    token if it has none); NaN rewards (OPD Searchers) become 0."""
    rows, cols, width = _positions(tokens, sample_ids)
    mask = tokens["loss_mask"].to_numpy(dtype=np.int64) > 0
    last = np.full(len(sample_ids), -1, dtype=np.int64)
    last_any = np.full(len(sample_ids), -1, dtype=np.int64)
    np.maximum.at(last_any, rows, cols)
    np.maximum.at(last, rows[mask], cols[mask])
    last = np.where(last >= 0, last, np.maximum(last_any, 0))
    out = np.zeros((len(sample_ids), max(width, 1)), dtype=np.float64)
    out[np.arange(len(sample_ids)), last] = np.nan_to_num(np.asarray(rewards, dtype=np.float64), nan=0.0)
    return torch.as_tensor(out, dtype=dtype)


def unpad(tokens: pd.DataFrame, sample_ids: np.ndarray, matrix: torch.Tensor) -> np.ndarray:
    """Values of a padded matrix at every token row of `tokens` (same order as `tokens`)."""
    rows, cols, _ = _positions(tokens, sample_ids)
    return matrix.detach().cpu().to(torch.float64).numpy()[rows, cols]
