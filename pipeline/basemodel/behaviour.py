"""A base model's behaviour on dev: both workflows, one rollout per question, at the
evaluation's sampling. The figures of data/metrics/base_behaviour.json."""

from __future__ import annotations

from typing import Any

import pandas as pd

from pipeline.agents.records import samples_table
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.agents.workflows import run_workflow
from pipeline.domain import ROLES, WORKFLOWS
from pipeline.eval.scoring import score_rollout
from pipeline.policy.base import PolicyBackend
from pipeline.retrieval.base import Retriever


def measure_behaviour(backend: PolicyBackend, retriever: Retriever, dev: pd.DataFrame, cfg: WorkflowConfig,
                      seed: int) -> dict[str, Any]:
    """Per workflow: well-formed share and calls per role, searches per workflow, no-search
    share, strict EM (also on single-hop questions, by the splits' `family`), final and
    forced answers; and the well-formed share per role over both workflows."""
    families = dict(zip(dev["id"].astype(str), dev["family"] if "family" in dev else ["?"] * len(dev)))
    result: dict[str, Any] = {"questions": len(dev)}
    calls: dict[str, list[bool]] = {r: [] for r in ROLES}
    for workflow in WORKFLOWS:
        rollout = run_workflow(workflow, dev, backend, retriever, cfg, n_traj=1, seed=seed)
        samples = samples_table(rollout)
        figures: dict[str, float] = {}
        for role in ROLES:
            malformed = samples.loc[samples["role"] == role, "malformed"].astype(bool).tolist()
            calls[role] += malformed
            if malformed:
                figures[f"wellformed_{role}"] = 1.0 - sum(malformed) / len(malformed)
                figures[f"calls_{role}"] = len(malformed)
        records = score_rollout(rollout)
        correct = records["strict_correct"].tolist()
        single = [c for qid, c in zip(records["question_id"], correct) if families.get(qid) == "single-hop"]
        n = len(records)
        figures.update({
            "searches_per_workflow": int(records["search_actions"].sum()) / n,
            "no_search_share": int((records["search_actions"] == 0).sum()) / n,
            "em": sum(correct) / n,
            "em_single_hop": sum(single) / len(single) if single else float("nan"),
            "single_hop_questions": len(single),
            "has_final_answer": int(records["has_final_answer"].sum()) / n,
            "forced_answer": int(records["forced_answer"].sum()) / n,
        })
        result[workflow] = figures
    result["wellformed"] = {r: 1.0 - sum(v) / len(v) for r, v in calls.items() if v}
    return result
