"""Numbers of the two team workflows, every one a params.yaml entry (pipeline.config.workflow_config
builds this record from `common.protocol` and a rollout section; nothing here has a default but
the grouped_generation speed switch, off)."""

from __future__ import annotations

from dataclasses import dataclass, field, fields

from pipeline.errors import InputError


@dataclass(frozen=True)
class WorkflowConfig:
    cascade_steps: int  # environment steps of the cascade (Answerer step not counted)
    hierarchy_steps: int  # environment steps of the hierarchy (Answerer step not counted)
    max_waves: int  # Leader dispatch waves
    max_parallel: int  # tasks (Searchers) per wave
    max_searcher_turns: int  # generation turns of one Searcher
    top_k: int  # passages per search
    n_candidates: int  # Answerer candidates per request: 5 training, 1 evaluation
    leader_max_new_tokens: int
    searcher_max_new_tokens: int
    answerer_max_new_tokens: int
    temperature: float
    top_p: float
    # SamplingParams.shared_prefixes and .row_max_new_tokens. Left out of repr, which fingerprints
    # stored outputs (pipeline.stages.stage2_start): those made before the switch existed stay valid.
    grouped_generation: bool = field(default=False, repr=False)

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            is_number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if f.name == "temperature":
                ok, expected = is_number and value >= 0, "a number >= 0"
            elif f.name == "top_p":
                ok, expected = is_number and 0 < value <= 1, "a number in (0, 1]"
            elif f.name == "grouped_generation":
                ok, expected = isinstance(value, bool), "true or false"
            else:
                ok = isinstance(value, int) and not isinstance(value, bool) and value >= 1
                expected = "an integer >= 1"
            if not ok:
                raise InputError(f"workflow config field '{f.name}': expected {expected}, got {value!r}")

    def max_new_tokens(self, role: str) -> int:
        return {
            "leader": self.leader_max_new_tokens,
            "searcher": self.searcher_max_new_tokens,
            "answerer": self.answerer_max_new_tokens,
        }[role]

    def budget(self, workflow: str) -> int:
        return {"cascade": self.cascade_steps, "hierarchy": self.hierarchy_steps}[workflow]
