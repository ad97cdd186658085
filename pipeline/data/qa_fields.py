"""The fields of one QA record, whatever layout it comes in: gold aliases, question, source id.

Gold aliases. Every alias list the record carries is gold; the lists found are merged in
the order below, without repeats. A lone answer string is used only when the record has no
alias list anywhere: some verl files store `", ".join(answers)` in `reward_model` and keep
the list in `extra_info`, and the joined string is not an alias. Places looked at:

    golden_answers                          FlashRAG, Search-R1
    answers
    answer, with aliases when present       plain JSON lists; TriviaQA as llm-foundry ships it
    Answer.Value, .Aliases, .NormalizedAliases   TriviaQA's official {"Data": [...]} files
    reward_model.ground_truth.target        Search-R1 (`reward_model` may be a JSON string)
    reward_model.ground_truth               verl
    extra_info.golden_answers, .answers, .answer   verl files (`extra_info` may be a JSON string)

Question: `question`, TriviaQA's `Question`, llm-foundry's `context` ("Question: ...\\nAnswer:"),
`extra_info.question`, else the last user message of a chat `prompt` (after "Question:").
Source id: the first of ID_FIELDS, then EXTRA_ID_FIELDS under `extra_info`, that is set.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from pipeline.errors import InputError

ID_FIELDS = ("id", "_id", "idx", "qid", "question_id", "test_id", "example_id", "QuestionId")
EXTRA_ID_FIELDS = ("id", "idx", "index")
EXTRA_ANSWER_FIELDS = ("golden_answers", "answers", "answer")
_TRIVIA_CONTEXT = re.compile(r"^\s*Question:\s*(.*?)\s*(?:\n\s*)?Answer:\s*$", re.DOTALL)


def present(v: Any) -> bool:
    return v is not None and not (isinstance(v, float) and math.isnan(v))


@dataclass(frozen=True)
class AnswerField:
    """Answers found in one place of a record; `is_list` when the place holds a list."""

    field: str
    values: list[str]
    is_list: bool


@dataclass(frozen=True)
class QARecord:
    source_id: str  # "" when the record has no id
    question: str
    golden_answers: list[str]
    set_aside: list[str]  # answer strings not used because the record has an alias list


def _strings(v: Any, where: str, field: str) -> AnswerField:
    """A string or a list/array of strings."""
    if isinstance(v, str):
        return AnswerField(field, [v], is_list=False)
    if isinstance(v, (list, tuple, np.ndarray)):
        items = list(v)
        for k, item in enumerate(items, start=1):
            if not isinstance(item, str):
                raise InputError(
                    f"{where}: field '{field}' must be a string or a list of strings; "
                    f"element {k} is {type(item).__name__} ({item!r})"
                )
        return AnswerField(field, items, is_list=True)
    raise InputError(
        f"{where}: field '{field}' must be a string or a list of strings, got {type(v).__name__} ({v!r})"
    )


def _mapping(v: Any, where: str, field: str) -> dict | None:
    """A dict, or a JSON string holding one (verl writers often json.dumps these columns)."""
    if isinstance(v, str):
        try:
            v = json.loads(v)
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: field '{field}' is a string but not valid JSON ({e.msg})") from e
    return v if isinstance(v, dict) else None


def _reward_model(rm: Any, where: str) -> AnswerField | None:
    rm = _mapping(rm, where, "reward_model")
    if rm is None or not present(rm.get("ground_truth")):
        return None
    gt = rm["ground_truth"]
    if isinstance(gt, dict):
        if not present(gt.get("target")):
            raise InputError(f"{where}: field 'reward_model.ground_truth' has no 'target'")
        return _strings(gt["target"], where, "reward_model.ground_truth.target")
    return _strings(gt, where, "reward_model.ground_truth")


def _capital_answer(answer: Any, where: str) -> AnswerField | None:
    """TriviaQA's Answer object (its Value, Aliases and NormalizedAliases as one list), or a plain answer."""
    if not isinstance(answer, dict):
        return _strings(answer, where, "Answer")
    values: list[str] = []
    for key in ("Value", "Aliases", "NormalizedAliases"):
        if present(answer.get(key)):
            values += _strings(answer[key], where, f"Answer.{key}").values
    return AnswerField("Answer", values, is_list=True) if values else None


def _answer_fields(rec: dict, extra: dict | None, where: str) -> list[AnswerField]:
    found: list[AnswerField | None] = []
    for field in ("golden_answers", "answers"):
        if present(rec.get(field)):
            found.append(_strings(rec[field], where, field))
    if present(rec.get("answer")):
        answer = _strings(rec["answer"], where, "answer")
        if present(rec.get("aliases")):
            aliases = _strings(rec["aliases"], where, "aliases")
            answer = AnswerField("answer+aliases", answer.values + aliases.values, is_list=True)
        found.append(answer)
    if present(rec.get("Answer")):
        found.append(_capital_answer(rec["Answer"], where))
    if present(rec.get("reward_model")):
        found.append(_reward_model(rec["reward_model"], where))
    for field in EXTRA_ANSWER_FIELDS:
        if extra is not None and present(extra.get(field)):
            found.append(_strings(extra[field], where, f"extra_info.{field}"))
    return [f for f in found if f is not None and f.values]


def _gold(rec: dict, extra: dict | None, where: str) -> tuple[list[str], list[str]]:
    """(aliases, answer strings set aside because the record has an alias list)."""
    found = _answer_fields(rec, extra, where)
    lists = [f for f in found if f.is_list]
    aliases = list(dict.fromkeys(v for f in (lists or found) for v in f.values))
    if not aliases:
        raise InputError(
            f"{where}: missing answers; expected field 'golden_answers', 'answers', 'answer', "
            f"'reward_model.ground_truth', 'extra_info.answer' or TriviaQA's 'Answer' "
            f"(a string or a non-empty list of strings)"
        )
    strings = [v for f in found if not f.is_list for v in f.values] if lists else []
    return aliases, list(dict.fromkeys(v for v in strings if v not in aliases))


def _from_prompt(prompt: Any) -> str | None:
    if isinstance(prompt, np.ndarray):
        prompt = list(prompt)
    if not isinstance(prompt, list):
        return None
    users = [m.get("content") for m in prompt if isinstance(m, dict) and m.get("role") == "user"]
    if not users or not isinstance(users[-1], str):
        return None
    content = users[-1]
    # Search-R1 style prompts wrap the question in instructions ending "Question: ...".
    return content.rsplit("Question:", 1)[-1].strip() if "Question:" in content else content


def _question(rec: dict, extra: dict | None, where: str) -> str:
    for field in ("question", "Question"):
        if present(rec.get(field)):
            if not isinstance(rec[field], str):
                raise InputError(f"{where}: field '{field}' must be a string, got {type(rec[field]).__name__}")
            return rec[field]
    if present(rec.get("context")):
        m = _TRIVIA_CONTEXT.match(str(rec["context"]))
        if not m:
            raise InputError(f"{where}: field 'context' must look like 'Question: ...\\nAnswer:'")
        return m.group(1)
    if extra is not None and isinstance(extra.get("question"), str):
        return extra["question"]
    from_prompt = _from_prompt(rec.get("prompt"))
    if from_prompt is not None:
        return from_prompt
    raise InputError(
        f"{where}: missing question; expected field 'question' (a string), TriviaQA's 'Question' or "
        f"'context', 'extra_info.question' or a chat 'prompt' with a user message"
    )


def _id_text(v: Any) -> str:
    if isinstance(v, (float, np.floating)) and float(v).is_integer():
        return str(int(v))  # parquet writers turn integer indexes into floats (0.0)
    if isinstance(v, np.integer):
        return str(int(v))
    return str(v).strip()


def _source_id(rec: dict, extra: dict | None) -> str:
    """The record's own id ("" when it has none)."""
    places = [(rec, f) for f in ID_FIELDS] + [(extra, f) for f in EXTRA_ID_FIELDS if extra is not None]
    for holder, field in places:
        value = holder.get(field)
        if present(value) and _id_text(value):
            return _id_text(value)
    return ""


def qa_record(rec: dict, where: str) -> QARecord:
    """One record of any recognised layout as (source id, question, gold aliases)."""
    extra = _mapping(rec["extra_info"], where, "extra_info") if present(rec.get("extra_info")) else None
    aliases, set_aside = _gold(rec, extra, where)
    return QARecord(_source_id(rec, extra), _question(rec, extra, where), aliases, set_aside)
