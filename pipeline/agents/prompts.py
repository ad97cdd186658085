"""Role prompts (Leader, Searcher, Answerer, Prompted-Critic judge) from prompts.yaml.

One Searcher template serves both workflows: its `task` is the original question in
the cascade and a subtask in the hierarchy, so the Stage I Teacher scores Stage II
Searchers on the very prompt shape it was trained on. Reports appear to the Leader
and the Answerer as "R1 [task] report" lines.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import yaml

from pipeline.errors import InputError

DEFAULT_PROMPTS_PATH = Path(__file__).with_name("prompts.yaml")

TEMPLATE_FIELDS: dict[str, frozenset[str]] = {
    "searcher": frozenset({"task"}),
    "answerer": frozenset({"question", "reports"}),
    "leader": frozenset({"question", "reports", "max_parallel"}),
    "judge": frozenset({"task", "passages", "report"}),
}
NO_REPORTS = "(none)"

_SCORE = re.compile(r"<score>\s*([0-9]+(?:\.[0-9]+)?)\s*</score>")


@dataclass(frozen=True)
class ReportLine:
    """One finished Searcher as the Leader and the Answerer see it."""

    report_id: str  # "R1", "R2", ...
    task: str
    text: str


def one_line(text: str) -> str:
    """Collapse all white space (newlines included) so a field stays on its line."""
    return " ".join(text.split())


def format_reports(reports: Sequence[ReportLine]) -> str:
    """'R1 [task] report' lines, or '(none)'."""
    if not reports:
        return NO_REPORTS
    return "\n".join(f"{r.report_id} [{one_line(r.task)}] {one_line(r.text)}" for r in reports)


@dataclass(frozen=True)
class Prompts:
    version: str
    searcher: str
    answerer: str
    leader: str
    judge: str

    def searcher_prompt(self, task: str) -> str:
        return self.searcher.format(task=one_line(task))

    def answerer_prompt(self, question: str, reports: Sequence[ReportLine]) -> str:
        return self.answerer.format(question=one_line(question), reports=format_reports(reports))

    def leader_prompt(self, question: str, reports: Sequence[ReportLine], max_parallel: int) -> str:
        return self.leader.format(
            question=one_line(question), reports=format_reports(reports), max_parallel=max_parallel
        )

    def judge_prompt(self, task: str, passages: str, report: str) -> str:
        """`passages`: the information bodies the Searcher retrieved (format_information text)."""
        return self.judge.format(
            task=one_line(task), passages=passages.strip() or NO_REPORTS, report=one_line(report)
        )


def _fields(template: str) -> set[str]:
    return {name for _, name, _, _ in string.Formatter().parse(template) if name is not None}


def load_prompts(path: str | Path = DEFAULT_PROMPTS_PATH) -> Prompts:
    """Read and check the prompt file: a `version` and every role template with its fields."""
    path = Path(path)
    try:
        raw = yaml.safe_load(path.read_text())
    except (OSError, yaml.YAMLError) as exc:
        raise InputError(f"{path}: cannot read prompt file: {exc}") from exc
    if not isinstance(raw, dict):
        raise InputError(f"{path}: expected a mapping with keys version, {', '.join(TEMPLATE_FIELDS)}")
    if "version" not in raw:
        raise InputError(f"{path}: missing field 'version'")
    templates: dict[str, str] = {}
    for role, expected in TEMPLATE_FIELDS.items():
        template = raw.get(role)
        if not isinstance(template, str) or not template.strip():
            raise InputError(f"{path}: field '{role}' must be a non-empty template string")
        try:
            found = _fields(template)
        except ValueError as exc:
            raise InputError(f"{path}: field '{role}' is not a valid format string: {exc}") from exc
        if found != expected:
            raise InputError(
                f"{path}: field '{role}' uses fields {sorted(found)}, expected exactly {sorted(expected)}"
            )
        templates[role] = template
    return Prompts(version=str(raw["version"]), **templates)


def parse_judge_score(text: str) -> float | None:
    """The judge's score from its first <score>n</score>, 0..10; None when absent or out of range."""
    match = _SCORE.search(text)
    if match is None:
        return None
    score = float(match.group(1))
    return score if 0.0 <= score <= 10.0 else None
