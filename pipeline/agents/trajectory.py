"""What a rollout records: model calls (= training samples), trajectories, the rollout.

A `Call` keeps the exact token ids: `prompt_ids` as encoded once, and a response made
of segments, each either generated (with its sampling log-probs) or an observation
(retrieved passages appended by the environment). Nothing is re-tokenised later.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pipeline.retrieval.base import Passage

if TYPE_CHECKING:
    from pipeline.agents.workflow_config import WorkflowConfig


@dataclass
class Segment:
    source: str  # "generated" | "observation"
    token_ids: list[int]
    logprobs: list[float]  # sampling log-probs; 0.0 for observations
    text: str


@dataclass
class Call:
    """One model call of one agent: one row of the samples table (one per Answerer candidate)."""

    sample_id: str
    role: str
    call_id: int
    agent_id: str
    step: int
    wave: int
    prompt_ids: list[int]
    prompt_text: str
    request_id: str = ""
    candidate_id: int = -1
    segments: list[Segment] = field(default_factory=list)
    action: str = ""
    malformed: bool = False
    malformation: str = ""
    malformation_detail: str = ""
    n_search: int = 0
    reported: bool = False
    cut: bool = False  # Searcher stopped by the step budget or its turn limit
    answer: str = ""
    is_final_request: bool = False
    task: str = ""  # Searcher: its task (the question in the cascade)
    report: str = ""  # Searcher: its report text ("" when none)
    queries: list[str] = field(default_factory=list)
    passages_text: str = ""  # Searcher: the information bodies it received, for the judge
    passages: list[Passage] = field(default_factory=list)  # Searcher: every passage it read, in order
    report_id: str = ""  # Searcher: how the Leader and the Answerer name its report (R1, R2, ...)
    n_turns: int = 0  # generation requests (a Searcher continues once per search)
    input_tokens: int = 0  # sum of context lengths over its turns
    output_tokens: int = 0
    finish_reason: str = ""  # of the last turn

    @property
    def response_ids(self) -> list[int]:
        return [t for s in self.segments for t in s.token_ids]

    @property
    def response_text(self) -> str:
        return "".join(s.text for s in self.segments)

    @property
    def context_ids(self) -> list[int]:
        """What the model sees when this call continues: prompt then response so far."""
        return self.prompt_ids + self.response_ids


@dataclass
class Trajectory:
    """One team rollout on one question."""

    trajectory_id: str
    question_id: str
    workflow: str
    dataset: str
    question: str
    golden_answers: list[str]
    hops: list[dict[str, str]] | None = None  # the question's hops (question, answer, title); None: unknown
    family: str = ""  # single-hop | bridge | composition | comparison; "" when unknown
    calls: list[Call] = field(default_factory=list)
    c_tool: int = 0
    forced_answer: bool = False
    steps: int = 0  # environment steps used, the Answerer's included
    waves: int = 0  # Leader dispatch waves (0 in the cascade)
    handed: list[str] = field(default_factory=list)  # the report ids the Answerer was given

    def calls_of(self, role: str) -> list[Call]:
        return [c for c in self.calls if c.role == role]

    @property
    def final_call(self) -> Call | None:
        """Candidate 0 of the final answer request: the workflow's last Answerer output."""
        finals = [c for c in self.calls if c.is_final_request and c.candidate_id == 0]
        return finals[-1] if finals else None

    @property
    def last_answerer_output(self) -> str:
        call = self.final_call
        return call.response_text if call else ""

    @property
    def has_final_answer(self) -> bool:
        call = self.final_call
        return call is not None and call.action == "answer"

    @property
    def final_answer(self) -> str:
        return self.final_call.answer if self.has_final_answer else ""

    @property
    def search_actions(self) -> int:
        return sum(c.n_search for c in self.calls_of("searcher"))

    @property
    def has_subtask_and_report(self) -> bool:
        """At least one Searcher ran on a task and handed in a well-formed report."""
        return any(c.reported for c in self.calls_of("searcher"))

    @property
    def input_tokens(self) -> int:
        return sum(c.input_tokens for c in self.calls)

    @property
    def output_tokens(self) -> int:
        return sum(c.output_tokens for c in self.calls)


@dataclass
class Rollout:
    workflow: str
    config: WorkflowConfig
    seed: int
    prompts_version: str
    trajectories: list[Trajectory]
    ticks: int = 0
    generate_calls: int = 0
    search_calls: int = 0

    @property
    def calls(self) -> list[Call]:
        return [c for t in self.trajectories for c in t.calls]
