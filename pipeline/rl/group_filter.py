"""Dynamic sampling (DAPO's group filter): train only on questions whose trajectories disagree.

A question whose trajectories all reach the same team outcome R_EM gives its outcome-reward
GRPO groups nothing to compare but the Searcher's behaviour bonus, which the group std scales
up to advantages of +-1 (the drift to more searches of the committed Teacher runs). So a step
of the Teacher rolls out `oversample` x `questions_per_batch` questions and trains on the first
`questions_per_batch` of them, in draw order, whose trajectories' R_EM differ.
"""

from __future__ import annotations

import pandas as pd

from pipeline.rl.checks import require_columns


def informative_questions(samples: pd.DataFrame) -> list[str]:
    """Question ids, in order of first appearance, whose trajectories' team outcome `r_em` differs,
    or, where the Searcher's reward counts its own report (`report_held` filled, Stage I with
    searcher_outcome "report"), whose trajectories' Searcher outcome differs."""
    require_columns(samples, ["question_id", "trajectory_id", "r_em"], "samples")
    keys = ["question_id", "trajectory_id"]
    outcomes = [samples.groupby(keys, sort=False)["r_em"].first()]
    if "report_held" in samples.columns and samples["report_held"].notna().any():
        outcomes.append(samples.groupby(keys, sort=False)["report_held"].max())
    informative: set = set()
    for per_trajectory in outcomes:
        per_question = per_trajectory.groupby(level="question_id", sort=False)
        spread = per_question.max() - per_question.min()
        informative |= {q for q, s in spread.items() if s > 0}
    order = list(dict.fromkeys(samples["question_id"]))
    return [q for q in order if q in informative]


def keep_questions(samples: pd.DataFrame, tokens: pd.DataFrame,
                   question_ids: list[str]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The samples of `question_ids` and their tokens (every sample of a question is kept)."""
    require_columns(samples, ["sample_id", "question_id"], "samples")
    require_columns(tokens, ["sample_id"], "tokens")
    kept = samples[samples["question_id"].isin(set(question_ids))].reset_index(drop=True)
    return kept, tokens[tokens["sample_id"].isin(set(kept["sample_id"]))].reset_index(drop=True)


def filter_batch(
    samples: pd.DataFrame, tokens: pd.DataFrame, questions_per_batch: int
) -> tuple[pd.DataFrame, pd.DataFrame, int]:
    """Keep the first `questions_per_batch` informative questions; with none, the first
    `questions_per_batch` questions drawn (as without the filter). Also returns how many of the
    drawn questions were informative."""
    informative = informative_questions(samples)
    drawn = list(dict.fromkeys(samples["question_id"]))
    chosen = (informative or drawn)[:questions_per_batch]
    kept_samples, kept_tokens = keep_questions(samples, tokens, chosen)
    return kept_samples, kept_tokens, len(informative)
