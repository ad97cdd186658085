"""Advantages of a verl batch of team samples with verl's registered `multiagent_opd` estimator.

verl 0.9.1's `compute_advantage` hands a registered estimator only token_level_rewards,
response_mask, index (= uid, the prompt) and config; ours also needs each row's role, GRPO
group, reward unit, sampling and Teacher log-probs. They travel in the rows' extra fields
(pipeline.verl_agent.outputs), so here the rows become the samples and tokens tables again,
`estimator_inputs` builds the estimator's arguments from them, and the estimator registered
under `multiagent_opd` runs on the whole batch (GRPO groups span the trajectories of a
question).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd
import torch
from verl.trainer.ppo.core_algos import get_adv_estimator_fn

from pipeline.rl.advantages import ESTIMATOR_NAME, estimator_inputs
from pipeline.verl_agent.outputs import (
    BETA_KEY,
    MODE_KEY,
    Row,
    batch_setting,
    rows_from_batch,
    rows_from_fields,
    tables_from_rows,
)


def table_advantages(samples: pd.DataFrame, tokens: pd.DataFrame, mode: str, beta: float) -> torch.Tensor:
    """(n_samples, max response length) advantages, rows in `samples` order."""
    advantages, _ = get_adv_estimator_fn(ESTIMATOR_NAME)(**estimator_inputs(samples, tokens, mode, beta))
    return advantages


def rows_advantages(rows: Sequence[Row]) -> torch.Tensor:
    """Advantages of verl rows (one per row, padded on the right to the longest response)."""
    samples, tokens = tables_from_rows(rows)
    return table_advantages(samples, tokens, batch_setting(rows, MODE_KEY), float(batch_setting(rows, BETA_KEY)))


def batch_advantages(batch: Any, non_tensor_batch: dict[str, np.ndarray]) -> torch.Tensor:
    """verl's `advantages` for a padded verl batch: (batch size, response width), 0 on padding
    rows and padding positions."""
    rows, index = rows_from_batch(batch, non_tensor_batch)
    out = torch.zeros(batch["responses"].shape, dtype=torch.float32)
    if rows:
        adv = rows_advantages(rows)
        out[torch.as_tensor(index), : adv.shape[1]] = adv.to(out.dtype)
    return out


def fields_advantages(fields: Any, tags: Sequence[dict]) -> torch.Tensor:
    """verl V1's `advantages` for TransferQueue fields (see outputs.rows_from_fields): a jagged
    tensor shaped like `response_mask`, 0 on padding rows."""
    from verl.workers.utils.padding import response_to_nested

    mask = fields["response_mask"]
    if not mask.is_nested:
        mask = torch.nested.as_nested_tensor(list(mask.unbind(0)), layout=torch.jagged)
    padded = torch.zeros(torch.nested.to_padded_tensor(mask, 0).shape, dtype=torch.float32)
    rows, index = rows_from_fields(fields, tags)
    if rows:
        adv = rows_advantages(rows)
        padded[torch.as_tensor(index), : adv.shape[1]] = adv.to(padded.dtype)
    return response_to_nested(padded, mask)
