"""Training audit (ARCHITECTURE: "training audit"): the tables exactly as they entered the loss.

`<audit_dir>/step-XXXX/samples.parquet`: every sample with `reward` (the value that entered
the advantage) and its parts (correct, r_em, c_tool, b_s, judge_score, malformed,
kl_to_teacher) and every id needed to re-group it. `tokens.parquet`: sample_id, pos, token_id,
role, source, loss_mask (as used in the loss), old_logp, teacher_logp, advantage. From these
two tables `pipeline.rl.advantages.compute_advantages` re-derives every advantage.
The mask-integrity suite (pipeline.validate.masks) runs on them; a violation raises ValidationFailed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import pandas as pd

from pipeline.errors import ValidationFailed
from pipeline.io import write_parquet
from pipeline.validate.masks import validate_masks


def write_audit(
    audit_root: Path,
    step: int,
    samples: pd.DataFrame,
    tokens: pd.DataFrame,
    decode: Callable[[Sequence[int]], str] | None,
) -> Path:
    """Write step-XXXX/{samples,tokens}.parquet and validate them; raise ValidationFailed on a violation."""
    out = Path(audit_root) / f"step-{step:04d}"
    write_parquet(out / "samples.parquet", samples.reset_index(drop=True))
    write_parquet(out / "tokens.parquet", tokens.reset_index(drop=True))
    outcome = validate_masks(
        samples, tokens, Path(audit_root) / "data_docs" / f"step-{step:04d}",
        decode=(lambda ids: decode(list(ids))) if decode else None,
    )
    if not outcome.success:
        raise ValidationFailed(f"{out}: mask integrity", outcome.failures)
    return out
