"""Teacher scoring (docs/method.md §5.2): the frozen Teacher, teacher-forced on exactly the student's context.

For each sample the Teacher gets the sample's own `prompt_ids` and its full response ids
(generated tokens with the observations interleaved, as recorded at rollout; never
re-tokenised) in ONE `backend.score` pass, which returns log pi_T of every response token
given everything before it. We keep the values on generated tokens and leave NaN on
observation tokens (the Teacher never scores what the environment wrote).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.policy.base import PolicyBackend
from pipeline.rl.checks import require_columns


def sample_token_ids(tokens: pd.DataFrame) -> dict[str, list[int]]:
    """sample_id -> its response token ids in `pos` order."""
    ordered = tokens.sort_values(["sample_id", "pos"], kind="stable")
    return {sid: [int(t) for t in ids] for sid, ids in ordered.groupby("sample_id", sort=False)["token_id"]}


def score_with_teacher(
    samples: pd.DataFrame, tokens: pd.DataFrame, teacher: PolicyBackend, only_loss_samples: bool = True
) -> pd.DataFrame:
    """Tokens with `teacher_logp` filled on generated tokens of the scored samples (NaN elsewhere).

    `only_loss_samples`: score only samples with at least one loss token (the others never use
    the Teacher), which saves a Teacher pass on untrained Searchers.
    """
    require_columns(samples, ["sample_id", "prompt_ids"], "samples")
    require_columns(tokens, ["sample_id", "pos", "token_id", "source", "loss_mask"], "tokens")
    out = tokens.copy()
    out["teacher_logp"] = np.nan
    wanted = set(samples["sample_id"])
    if only_loss_samples:
        wanted &= set(tokens.loc[tokens["loss_mask"].to_numpy() > 0, "sample_id"])
    responses = sample_token_ids(tokens[tokens["sample_id"].isin(wanted)])
    prompt_of = samples.set_index("sample_id")["prompt_ids"]
    order = [sid for sid in samples["sample_id"] if sid in responses]
    if not order:
        return out
    scores = teacher.score([list(prompt_of[sid]) for sid in order], [responses[sid] for sid in order])
    by_sample = {sid: np.asarray(s, dtype=np.float64) for sid, s in zip(order, scores)}
    for sid, values in by_sample.items():
        if len(values) != len(responses[sid]):
            raise RuntimeError(f"teacher returned {len(values)} log-probs for {len(responses[sid])} tokens of {sid}")
    scored = out["sample_id"].isin(by_sample).to_numpy() & (out["source"] == "generated").to_numpy()
    rows = np.flatnonzero(scored)
    sids = out["sample_id"].to_numpy()[rows]
    pos = out["pos"].to_numpy(dtype=np.int64)[rows]
    values = np.array([by_sample[s][p] for s, p in zip(sids, pos)], dtype=np.float64)
    teacher_logp = out["teacher_logp"].to_numpy(dtype=np.float64).copy()
    teacher_logp[rows] = values
    out["teacher_logp"] = teacher_logp
    return out
