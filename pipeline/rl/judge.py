"""Prompted-Critic judge (docs/method.md §5.4): the base model, prompted, scores each Searcher report 0..10.

One greedy generation per well-formed Searcher sample from `Prompts.judge_prompt(task,
passages it retrieved, report)`; `parse_judge_score` reads `<score>n</score>`. An unparsable
answer scores 0 and is counted. Malformed Searchers are not judged (their reward is -1).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from pipeline.agents.prompts import Prompts, load_prompts, parse_judge_score
from pipeline.policy.base import PolicyBackend, SamplingParams
from pipeline.rl.checks import require_columns

JUDGE_STOP = ("</score>",)


def judge_searchers(
    samples: pd.DataFrame,
    judge: PolicyBackend,
    max_new_tokens: int,
    prompts: Prompts | None = None,
    seed: int = 0,
) -> tuple[pd.DataFrame, int]:
    """Samples with `judge_score` on well-formed Searcher rows (NaN elsewhere), and the count of
    unparsable judge outputs (scored 0)."""
    require_columns(samples, ["role", "malformed", "task", "passages_text", "report"], "samples")
    prompts = prompts or load_prompts()
    out = samples.copy()
    out["judge_score"] = np.nan
    rows = np.flatnonzero((out["role"] == "searcher").to_numpy() & ~out["malformed"].astype(bool).to_numpy())
    if len(rows) == 0:
        return out, 0
    texts = [
        prompts.judge_prompt(str(out["task"].iat[i]), str(out["passages_text"].iat[i]), str(out["report"].iat[i]))
        for i in rows
    ]
    params = SamplingParams(
        temperature=0.0, max_new_tokens=max_new_tokens, stop=JUDGE_STOP, seed=seed
    )
    generations = judge.generate([judge.encode_prompt(t) for t in texts], params, n=1)
    scores, unparsable = [], 0
    for gen in generations:
        score = parse_judge_score(gen[0].text)
        if score is None:
            unparsable += 1
            score = 0.0
        scores.append(score)
    column = out["judge_score"].to_numpy(dtype=np.float64).copy()
    column[rows] = scores
    out["judge_score"] = column
    return out, unparsable
