"""A fixed seeded draw of dev questions that spans every training dataset.

The dev split is stored dataset by dataset, so its first rows come from one dataset only."""

from __future__ import annotations

import numpy as np
import pandas as pd


def dev_sample(dev: pd.DataFrame, n: int, seed: int) -> pd.DataFrame:
    """`n` dev questions, the same for the same seed, kept in dev's order; all of dev when
    `n` is not below its size."""
    if n >= len(dev):
        return dev
    keep = np.sort(np.random.default_rng(seed).choice(len(dev), size=n, replace=False))
    return dev.iloc[keep]
