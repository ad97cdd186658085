"""The report's list of where a profile's training departs from the paper's constants
(docs/method.md §5.3, §6), each with its reason, read from the profile's own params."""

from __future__ import annotations

from pipeline.config import Params
from pipeline.systems import BY_NAME, TEACHER

# The paper's values of the training settings a profile may set apart from them.
PAPER_OPD_BETA = 0.01
PAPER_TIE_ON = "reward"  # verl's GRPO: a group is tied when its rewards are equal
PAPER_OVERSAMPLE = 1  # the paper samples its batch without a group filter
PAPER_SEARCHER_OUTCOME = "team"  # Stage I: the Searcher's reward counts the team's EM

REASONS = {
    "opd_beta": ("at the paper's 0.01 the Searcher's OPD advantage is some 2,000 times smaller than the GRPO "
                 "advantages sharing its weights, and a short run hardly moves it "
                 "(docs/tuning.md#tied-groups)"),
    "tie_on": ("a group tied on EM keeps rewards spread by the 0.1 assignment bonus and the 1e-3 KL term, "
               "which GRPO's std division turns into advantages of about +-1 from noise "
               "(docs/tuning.md#tied-groups)"),
    "oversample": ("without it most groups tie on EM and the Searcher's behaviour bonus is the only signal "
                   "(docs/tuning.md#dynamic-sampling)"),
    "searcher_outcome": ("the team's EM also rewards the Answerer's luck, and at this scale the Searcher's share "
                         "of it was too small for Stage I to teach the Searcher anything OPD could carry "
                         "(docs/tuning.md#teacher-searcher)"),
}


def departures(params: Params) -> list[str]:
    """One Markdown bullet per setting of `params`' profile that differs from the paper's."""
    shared = params.train.shared
    out = []
    if shared.opd_beta != PAPER_OPD_BETA:
        out.append(f"OPD beta {shared.opd_beta:g} (paper {PAPER_OPD_BETA:g}), chosen on dev: {REASONS['opd_beta']}.")
    if shared.tie_on != PAPER_TIE_ON:
        out.append(f"GRPO groups tied on the outcome before bonuses and the KL term get advantage 0 (tie_on "
                   f"`{shared.tie_on}`; the paper: equal rewards), chosen on dev: "
                   f"{REASONS['tie_on']}.")
    for name, own in params.train.systems:
        if own.oversample != PAPER_OVERSAMPLE:
            out.append(f"{BY_NAME[name].label} trains on questions whose trajectories' outcomes differ "
                       f"(dynamic sampling, {own.oversample}x oversampled; the paper: no filter): "
                       f"{REASONS['oversample']}.")
    teacher = getattr(params.train.systems, TEACHER)
    if teacher.searcher_outcome != PAPER_SEARCHER_OUTCOME:
        out.append(f"{BY_NAME[TEACHER].label}: the Searcher's Stage-I reward counts whether its own report holds "
                   f"a gold answer, R_S = 0.9 x [report holds a gold alias] + 0.1 b_S (the paper: 0.9 R_EM + 0.1 "
                   f"b_S), chosen on held-out questions: {REASONS['searcher_outcome']}.")
    return out
