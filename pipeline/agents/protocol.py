"""The action tag grammar of docs/method.md §3 and its parser.

A model call's generated text is: optional white space, an optional leading
`<think>...</think>`, optional white space, then exactly one action:

    <search>query</search>                      searcher
    <report>text</report>                       searcher
    <answer>text</answer>                       answerer
    <dispatch><task>t</task>...</dispatch>      leader (1..max_parallel tasks)
    <answer_with>R1,R3</answer_with>            leader (comma-separated report ids)

The action ends at the first closing action tag; whatever follows it is ignored
(generation stops there). Anything else is a `Malformed` with one of `MALFORMATIONS`.
Decisions docs/method.md leaves open:
- free text before the action (other than the think block) is malformed
  ("text_before_action"); white space anywhere between blocks is fine;
- an empty `<report></report>` and an empty `<answer></answer>` are well-formed;
- an empty `<answer_with></answer_with>` is well-formed: the Leader hands over no report;
- report ids must look like R<number>; duplicates are kept as written.
"""

from __future__ import annotations

import re
from collections.abc import Collection
from dataclasses import dataclass

ACTION_TAGS = ("search", "report", "answer", "dispatch", "answer_with")
# Every closing action tag: the stop list of every generation request.
STOP_TAGS: tuple[str, ...] = tuple(f"</{tag}>" for tag in ACTION_TAGS)

ROLE_ACTIONS: dict[str, frozenset[str]] = {
    "searcher": frozenset({"search", "report"}),
    "answerer": frozenset({"answer"}),
    "leader": frozenset({"dispatch", "answer_with"}),
}

MALFORMATIONS = (
    "empty",  # nothing but white space
    "unclosed_think",  # <think> without </think>
    "no_action",  # no action opening tag before the first closing tag
    "no_closed_tag",  # an action was opened but never closed
    "two_actions",  # a second action opened before the first one closed
    "mismatched_tag",  # <search> closed by </report>, ...
    "text_before_action",  # free text outside think before the action
    "wrong_role_action",  # an action this role may not take
    "empty_query",
    "bad_dispatch",  # text other than <task> blocks inside <dispatch>
    "no_tasks",
    "empty_task",
    "too_many_tasks",
    "bad_report_id",  # not of the form R<number>
    "unknown_report_id",
)

_OPEN = re.compile(r"<(search|report|answer|dispatch|answer_with)>")
_CLOSE = re.compile(r"</(search|report|answer|dispatch|answer_with)>")
_TASK = re.compile(r"<task>(.*?)</task>", re.DOTALL)
_REPORT_ID = re.compile(r"R[0-9]+")
_THINK_OPEN, _THINK_CLOSE = "<think>", "</think>"


@dataclass(frozen=True)
class Search:
    query: str
    name = "search"


@dataclass(frozen=True)
class Report:
    text: str
    name = "report"


@dataclass(frozen=True)
class Answer:
    text: str
    name = "answer"


@dataclass(frozen=True)
class Dispatch:
    tasks: tuple[str, ...]
    name = "dispatch"


@dataclass(frozen=True)
class AnswerWith:
    report_ids: tuple[str, ...]
    name = "answer_with"


Action = Search | Report | Answer | Dispatch | AnswerWith


@dataclass(frozen=True)
class Malformed:
    kind: str  # one of MALFORMATIONS
    detail: str = ""


def render_action(action: Action, think: str | None = None) -> str:
    """The canonical text of an action (what a perfect model would write)."""
    prefix = f"{_THINK_OPEN}{think}{_THINK_CLOSE}" if think is not None else ""
    if isinstance(action, Search):
        body = f"<search>{action.query}</search>"
    elif isinstance(action, Report):
        body = f"<report>{action.text}</report>"
    elif isinstance(action, Answer):
        body = f"<answer>{action.text}</answer>"
    elif isinstance(action, Dispatch):
        body = "<dispatch>" + "".join(f"<task>{t}</task>" for t in action.tasks) + "</dispatch>"
    elif isinstance(action, AnswerWith):
        body = f"<answer_with>{','.join(action.report_ids)}</answer_with>"
    else:
        raise TypeError(f"not an action: {action!r}")
    return prefix + body


def _snippet(text: str, limit: int = 60) -> str:
    return repr(text if len(text) <= limit else text[:limit] + "...")


def _strip_think(text: str) -> str | Malformed:
    """Drop leading white space and an optional leading think block."""
    body = text.lstrip()
    if body.startswith(_THINK_OPEN):
        end = body.find(_THINK_CLOSE)
        if end < 0:
            return Malformed("unclosed_think", "<think> is never closed")
        body = body[end + len(_THINK_CLOSE) :]
    return body


def _locate(body: str) -> tuple[str, str] | Malformed:
    """(tag, content) of the single action in `body`, which must start with it."""
    close = _CLOSE.search(body)
    head = body[: close.start()] if close else body
    opens = list(_OPEN.finditer(head))
    if not opens:
        detail = f"no action tag in {_snippet(head)}" if not close else f"{close.group(0)} without opening tag"
        return Malformed("no_action", detail)
    if close is None:
        return Malformed("no_closed_tag", f"<{opens[0].group(1)}> is never closed")
    if len(opens) > 1:
        names = ", ".join(f"<{m.group(1)}>" for m in opens)
        return Malformed("two_actions", f"opened {names} before {close.group(0)}")
    first = opens[0]
    if first.group(1) != close.group(1):
        return Malformed("mismatched_tag", f"<{first.group(1)}> closed by {close.group(0)}")
    if head[: first.start()].strip():
        return Malformed("text_before_action", _snippet(head[: first.start()].strip()))
    return first.group(1), head[first.end() :]


def _dispatch(content: str, max_parallel: int) -> Dispatch | Malformed:
    tasks = [m.group(1).strip() for m in _TASK.finditer(content)]
    rest = _TASK.sub("", content)
    if rest.strip():
        return Malformed("bad_dispatch", f"text outside <task> blocks: {_snippet(rest.strip())}")
    if not tasks:
        return Malformed("no_tasks", "<dispatch> holds no <task>")
    if any(not t for t in tasks):
        return Malformed("empty_task", "a <task> is empty")
    if len(tasks) > max_parallel:
        return Malformed("too_many_tasks", f"{len(tasks)} tasks, at most {max_parallel}")
    return Dispatch(tuple(tasks))


def _answer_with(content: str, known_reports: Collection[str]) -> AnswerWith | Malformed:
    if not content.strip():
        return AnswerWith(())
    ids = tuple(part.strip() for part in content.split(","))
    bad = [i for i in ids if not _REPORT_ID.fullmatch(i)]
    if bad:
        return Malformed("bad_report_id", f"expected ids like R1, got {_snippet(bad[0])}")
    unknown = [i for i in ids if i not in known_reports]
    if unknown:
        return Malformed("unknown_report_id", f"{', '.join(unknown)} not among {sorted(known_reports)}")
    return AnswerWith(ids)


def parse_action(
    text: str,
    role: str,
    *,
    max_parallel: int = 3,
    known_reports: Collection[str] = (),
) -> Action | Malformed:
    """Parse one call's generated text for `role`; never raises on any text."""
    if role not in ROLE_ACTIONS:
        raise ValueError(f"unknown role {role!r}; expected one of {sorted(ROLE_ACTIONS)}")
    if not text.strip():
        return Malformed("empty", "no text")
    body = _strip_think(text)
    if isinstance(body, Malformed):
        return body
    located = _locate(body)
    if isinstance(located, Malformed):
        return located
    tag, content = located
    if tag not in ROLE_ACTIONS[role]:
        return Malformed("wrong_role_action", f"{role} may not use <{tag}>")
    if tag == "search":
        query = content.strip()
        return Search(query) if query else Malformed("empty_query", "<search> is empty")
    if tag == "report":
        return Report(content.strip())
    if tag == "answer":
        return Answer(content.strip())
    if tag == "dispatch":
        return _dispatch(content, max_parallel)
    return _answer_with(content, known_reports)


def action_name(parsed: Action | Malformed) -> str:
    """The `action` column value: the tag name, or "" for a malformed call."""
    return "" if isinstance(parsed, Malformed) else parsed.name
