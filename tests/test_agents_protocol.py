"""The action grammar (pipeline.agents.protocol) and the role prompts (pipeline.agents.prompts)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline.agents.prompts import (
    DEFAULT_PROMPTS_PATH,
    ReportLine,
    format_reports,
    load_prompts,
    parse_judge_score,
)
from pipeline.agents.protocol import (
    MALFORMATIONS,
    ROLE_ACTIONS,
    STOP_TAGS,
    Answer,
    AnswerWith,
    Dispatch,
    Malformed,
    Report,
    Search,
    action_name,
    parse_action,
    render_action,
)
from pipeline.errors import InputError

# ---------------------------------------------------------------- strategies

_plain = st.text(
    alphabet=st.characters(blacklist_characters="<>", blacklist_categories=("Cs",)), max_size=30
)
content = _plain.map(str.strip).filter(bool)  # non-empty, stripped, tag-free
maybe_empty = _plain.map(str.strip)
report_ids = st.integers(1, 30).map(lambda i: f"R{i}")
ALL_IDS = tuple(f"R{i}" for i in range(1, 31))

actions = st.one_of(
    st.builds(Search, content),
    st.builds(Report, maybe_empty),
    st.builds(Answer, maybe_empty),
    st.lists(content, min_size=1, max_size=3).map(lambda ts: Dispatch(tuple(ts))),
    st.lists(report_ids, max_size=4).map(lambda ids: AnswerWith(tuple(ids))),
)
ROLE_OF = {"search": "searcher", "report": "searcher", "answer": "answerer", "dispatch": "leader",
           "answer_with": "leader"}

FRAGMENTS = [
    "<search>", "</search>", "<report>", "</report>", "<answer>", "</answer>", "<dispatch>",
    "</dispatch>", "<task>", "</task>", "<answer_with>", "</answer_with>", "<think>", "</think>",
    "R1", "R2", ",", " ", "\n", "x", "<", ">",
]
noisy_text = st.one_of(st.text(max_size=60),
                       st.lists(st.sampled_from(FRAGMENTS) | st.text(max_size=4), max_size=12).map("".join))


def _parse(text: str, role: str, **kw):
    return parse_action(text, role, known_reports=ALL_IDS, **kw)


def _close_tag(action) -> str:
    return f"</{action.name}>"


def _open_tag(action) -> str:
    return f"<{action.name}>"


# ---------------------------------------------------------------- properties


@given(actions, st.none() | _plain, st.text(max_size=40))
def test_rendered_action_parses_back_to_itself(action, think, trailing):
    text = render_action(action, think=think) + trailing  # text after the action is ignored
    assert _parse(text, ROLE_OF[action.name]) == action


@given(actions, actions, st.booleans())
def test_second_action_inside_the_first_is_two_actions(first, second, after_open):
    rendered = render_action(first)
    if after_open:
        cut = len(_open_tag(first))
    else:
        cut = len(rendered) - len(_close_tag(first))
    text = rendered[:cut] + render_action(second) + rendered[cut:]
    result = _parse(text, ROLE_OF[first.name])
    assert result == Malformed("two_actions", result.detail)


@given(actions)
def test_missing_closing_tag_is_no_closed_tag(action):
    text = render_action(action)[: -len(_close_tag(action))]
    result = _parse(text, ROLE_OF[action.name])
    assert isinstance(result, Malformed) and result.kind == "no_closed_tag"


@given(actions, st.sampled_from(sorted(ROLE_ACTIONS)))
def test_action_of_another_role_is_wrong_role_action(action, role):
    result = _parse(render_action(action), role)
    if action.name in ROLE_ACTIONS[role]:
        assert result == action
    else:
        assert isinstance(result, Malformed) and result.kind == "wrong_role_action"


@given(noisy_text, st.sampled_from(sorted(ROLE_ACTIONS)), st.integers(1, 4))
def test_arbitrary_text_never_raises(text, role, max_parallel):
    result = parse_action(text, role, max_parallel=max_parallel, known_reports=("R1",))
    assert isinstance(result, (Search, Report, Answer, Dispatch, AnswerWith, Malformed))
    if isinstance(result, Malformed):
        assert result.kind in MALFORMATIONS
        assert action_name(result) == ""
    else:
        assert result.name in ROLE_ACTIONS[role]


# ---------------------------------------------------------------- examples

MALFORMED_EXAMPLES = [
    ("", "searcher", {}, "empty"),
    ("  \n ", "leader", {}, "empty"),
    ("<think>hmm <search>q</search>", "searcher", {}, "unclosed_think"),
    ("I do not know", "answerer", {}, "no_action"),
    ("q</search>", "searcher", {}, "no_action"),
    ("<search>q", "searcher", {}, "no_closed_tag"),
    ("<search>q<report>r</report>", "searcher", {}, "two_actions"),
    ("<search>q</report>", "searcher", {}, "mismatched_tag"),
    ("so: <search>q</search>", "searcher", {}, "text_before_action"),
    ("<think>a</think>b<search>q</search>", "searcher", {}, "text_before_action"),
    ("<answer>x</answer>", "searcher", {}, "wrong_role_action"),
    ("<search>x</search>", "leader", {}, "wrong_role_action"),
    ("<search>  \n</search>", "searcher", {}, "empty_query"),
    ("<dispatch><task>a</task> and b</dispatch>", "leader", {}, "bad_dispatch"),
    ("<dispatch><task>a</dispatch>", "leader", {}, "bad_dispatch"),
    ("<dispatch> </dispatch>", "leader", {}, "no_tasks"),
    ("<dispatch><task>a</task><task> </task></dispatch>", "leader", {}, "empty_task"),
    ("<dispatch>" + "<task>t</task>" * 4 + "</dispatch>", "leader", {}, "too_many_tasks"),
    ("<answer_with>R1, report two</answer_with>", "leader", {"known_reports": ("R1",)}, "bad_report_id"),
    ("<answer_with>R1,R9</answer_with>", "leader", {"known_reports": ("R1", "R2")}, "unknown_report_id"),
    ("<answer_with>R1</answer_with>", "leader", {}, "unknown_report_id"),
]


@pytest.mark.parametrize(("text", "role", "kw", "kind"), MALFORMED_EXAMPLES)
def test_malformed_examples(text, role, kw, kind):
    result = parse_action(text, role, **kw)
    assert isinstance(result, Malformed)
    assert result.kind == kind, result


def test_every_malformation_kind_is_reachable():
    assert {kind for *_, kind in MALFORMED_EXAMPLES} == set(MALFORMATIONS)


@pytest.mark.parametrize(
    ("text", "role", "kw", "expected"),
    [
        ("<think>plan</think>\n <search> capital of France </search> trailing <report>", "searcher", {},
         Search("capital of France")),
        ("<report></report>", "searcher", {}, Report("")),
        (" <answer>Paris</answer>\n", "answerer", {}, Answer("Paris")),
        ("<dispatch>\n<task>a</task>\n<task> b </task>\n</dispatch>", "leader", {}, Dispatch(("a", "b"))),
        ("<dispatch>" + "<task>t</task>" * 4 + "</dispatch>", "leader", {"max_parallel": 4}, Dispatch(("t",) * 4)),
        ("<answer_with> R2 , R1 </answer_with>", "leader", {"known_reports": ("R1", "R2")}, AnswerWith(("R2", "R1"))),
        ("<answer_with></answer_with>", "leader", {}, AnswerWith(())),
        ("<answer>a <b> c</answer>", "answerer", {}, Answer("a <b> c")),
    ],
)
def test_wellformed_examples(text, role, kw, expected):
    assert parse_action(text, role, **kw) == expected


def test_unknown_role_raises():
    with pytest.raises(ValueError, match="unknown role"):
        parse_action("<answer>x</answer>", "critic")


def test_stop_tags_are_the_closing_action_tags_only():
    assert set(STOP_TAGS) == {"</search>", "</report>", "</answer>", "</dispatch>", "</answer_with>"}


# ---------------------------------------------------------------- prompts


@pytest.fixture(scope="module")
def prompts():
    return load_prompts()


def test_prompt_file_has_a_version_and_prompts_end_where_generation_starts(prompts):
    assert prompts.version
    assert prompts.searcher_prompt("t").endswith("\nSearcher:")
    assert prompts.leader_prompt("q", [], 3).endswith("\nLeader:")
    assert prompts.answerer_prompt("q", []).endswith("\nAnswerer:")
    assert prompts.judge_prompt("t", "Doc 1(Title: a) b", "r").endswith("\nJudge:")


def test_prompts_hold_their_fields(prompts):
    reports = [ReportLine("R1", "who wrote {x}?", "bob\nwrote it"), ReportLine("R2", "when", "")]
    leader = prompts.leader_prompt("Who is {0}?", reports, 3)
    assert "Question: Who is {0}?" in leader  # braces in values are not re-formatted
    assert "R1 [who wrote {x}?] bob wrote it\nR2 [when] " in leader
    assert "3 tasks" in leader
    answerer = prompts.answerer_prompt("q?", reports[:1])
    assert "Question: q?" in answerer and "R1 [who wrote {x}?] bob wrote it" in answerer
    assert "Task: multi word task" in prompts.searcher_prompt("multi\nword  task")
    judge = prompts.judge_prompt("sub", "Doc 1(Title: A) alpha\nDoc 2(Title: B) beta", "my report")
    assert "Subtask: sub" in judge and "Doc 2(Title: B) beta" in judge and "Report: my report" in judge


def test_format_reports_empty_and_lines():
    assert format_reports([]) == "(none)"
    assert format_reports([ReportLine("R3", "t", "r")]) == "R3 [t] r"


@pytest.mark.parametrize(
    ("text", "score"),
    [("<score>7</score>", 7.0), ("ok <score> 10 </score>", 10.0), ("<score>3.5</score><score>9</score>", 3.5),
     ("<score>0</score>", 0.0), ("<score>11</score>", None), ("<score>-1</score>", None),
     ("score: 7", None), ("<score>7", None), ("", None)],
)
def test_parse_judge_score(text, score):
    assert parse_judge_score(text) == score


@given(st.text(max_size=40))
def test_parse_judge_score_never_raises(text):
    score = parse_judge_score(text)
    assert score is None or 0.0 <= score <= 10.0


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda s: s.replace("version: 1\n", ""), "'version'"),
        (lambda s: s.replace("Task: {task}", "Task: {subtask}"), "'searcher'"),
        (lambda s: s.replace("Question: {question}\n  Reports:\n  {reports}\n  Leader:", "Leader:"), "'leader'"),
        (lambda s: s + "\nbroken: [unclosed\n", "cannot read"),
    ],
)
def test_bad_prompt_file_raises_input_error(tmp_path, edit, message):
    path = tmp_path / "prompts.yaml"
    path.write_text(edit(DEFAULT_PROMPTS_PATH.read_text()))
    with pytest.raises(InputError, match=message) as info:
        load_prompts(path)
    assert str(path) in str(info.value)
