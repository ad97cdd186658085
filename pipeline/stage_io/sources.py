"""Where the splits and corpus stages take their questions and passages from: the synthetic
world of the tiny and ci profiles, or the raw files of the paper profile (data/raw/)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from pipeline.config import Params


def world(params: Params):
    """The synthetic world of `<profile>.data.world`."""
    from pipeline.data.world import WorldConfig, generate_world

    cfg = WorldConfig.from_dict(dict(params.data.world), where=f"{params.source}: {params.profile}.data.world")
    return generate_world(cfg)


def load_question_pool(params: Params, root: Path) -> pd.DataFrame:
    """All candidate questions (before dedup and sampling) of the active profile."""
    if params.data.source == "synthetic":
        return world(params).questions
    from pipeline.data.loaders import load_raw_dir

    questions, _ = load_raw_dir(root / params.data.raw_dir)
    return questions
