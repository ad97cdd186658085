"""Numbers published in the paper (docs/method.md §9), printed beside ours and labelled so.

These are the only numbers of the report that are typed in; the macro avg@4 / pass@4
of the main table live with the systems in pipeline.systems.
"""

from __future__ import annotations

LABEL = "published (Qwen3-4B, paper)"

# Paired 95% intervals of the macro avg@4 gap MultiAgent-OPD - baseline: (diff, low, high).
GAPS: dict[str, tuple[float, float, float]] = {
    "prompted_critic": (4.06, 2.98, 5.12),
    "c_mas_rl": (2.61, 1.49, 3.73),
}
# Perfect-repair bounds of the same gaps.
PERFECT_REPAIR: dict[str, tuple[float, float, float]] = {
    "prompted_critic": (0.33, -0.80, 1.46),
    "c_mas_rl": (2.51, 1.39, 3.65),
}
ALL4: dict[str, float] = {"multiagent_opd": 29.27, "c_mas_rl": 27.05, "prompted_critic": 23.24}
# Per-workflow workload: search actions, input tokens, output tokens (None: not published).
WORKLOAD: dict[str, tuple[float | None, float | None, float | None]] = {
    "c_mas_rl": (2.86, 3886, None),
    "prompted_critic": (4.45, 6786, 885),
    "multiagent_opd": (5.39, 9172, 697),
}
# Per-dataset avg@4 points the paper quotes.
DATASET_AVG4: dict[tuple[str, str], float] = {
    ("c_mas_rl", "nq"): 43.7, ("multiagent_opd", "nq"): 42.3,
    ("c_mas_rl", "bamboogle"): 39.4, ("multiagent_opd", "bamboogle"): 46.8,
}
FORMAT_FAILURE_MACRO: dict[str, float] = {"multiagent_opd": 0.68}
RESCUED_BY_FLEXIBLE: dict[str, int] = {"multiagent_opd": 0}
# Outcome-RL Searcher ablation: behaviour over 20,000 workflows (percent).
OUTCOME_RL_BEHAVIOUR = {"no_search_share": 100.0, "subtask_and_report_share": 99.51,
                        "final_answer_share": 99.03}
# External systems the paper compares with (docs/method.md §9): macro avg@4 and pass@4 (None:
# not given). Published-only rows of the main table: not rebuilt here.
EXTERNAL: dict[str, tuple[float, float | None]] = {
    "Search-R1": (33.39, None),
    "DeSA": (36.96, None),
    "MemSearcher": (36.81, 47.64),
    "Dr. MAS": (35.54, None),
    "Tree-GRPO": (37.37, None),
}
