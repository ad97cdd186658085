"""Cascade and hierarchy workflows with the scripted fake backend and retriever."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.agents.protocol import STOP_TAGS
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.agents.workflows import run_cascade, run_hierarchy
from pipeline.errors import InputError
from pipeline.policy.sampling_seeds import key_seed
from tests.helpers.configs import workflow_cfg
from tests.helpers.fakes import FakeBackend, FakeRetriever, TeamScript, field_of, make_questions, role_of

# The fake tokenizer is character-level, so generation limits must be generous.
BIG = dict(leader_max_new_tokens=400, searcher_max_new_tokens=300, answerer_max_new_tokens=100)


def _cfg(**kw) -> WorkflowConfig:
    return workflow_cfg(**{**BIG, **kw})


def _run(workflow, script, n_questions=1, n_traj=1, seed=0, **cfg):
    backend, retriever = FakeBackend(script), FakeRetriever()
    run = run_cascade if workflow == "cascade" else run_hierarchy
    rollout = run(make_questions(n_questions), backend, retriever, _cfg(**cfg), n_traj=n_traj, seed=seed)
    return rollout, backend, retriever


def _answerer_prompt(traj) -> str:
    return traj.calls_of("answerer")[0].prompt_text


# ---------------------------------------------------------------- batching


@pytest.mark.parametrize("workflow", ["cascade", "hierarchy"])
def test_one_generate_call_and_one_search_call_per_tick(workflow):
    rollout, backend, retriever = _run(workflow, TeamScript(n_searches=2, tasks_per_wave=2), n_questions=3, n_traj=2)
    assert len(backend.generate_calls) == rollout.ticks == rollout.generate_calls
    assert len(retriever.calls) == rollout.search_calls == 2  # two search ticks
    searchers_per_traj = 1 if workflow == "cascade" else 2
    assert [len(c) for c in retriever.calls] == [6 * searchers_per_traj] * 2  # 3 questions x 2 trajectories
    # every tick's single call carries every request of all 6 trajectories
    turns_per_tick = pd.Series([c.step for c in rollout.calls if c.role != "answerer"]).value_counts()
    assert all(call["n"] == 1 and set(call["params"].stop) == set(STOP_TAGS) for call in backend.generate_calls)
    assert sum(c["batch"] for c in backend.generate_calls) == sum(c.n_turns for c in rollout.calls)
    assert backend.generate_calls[-1]["batch"] == 6 * 5  # the Answerer tick: 5 candidates each
    assert turns_per_tick.min() >= 6


def test_request_seeds_are_keyed_by_the_request_and_depend_on_the_rollout_seed():
    r1, b1, _ = _run("cascade", TeamScript(n_searches=2), seed=1)
    _, b2, _ = _run("cascade", TeamScript(n_searches=2), seed=2)
    s1 = [s for c in b1.generate_calls for s in c["params"].row_seeds]
    s2 = [s for c in b2.generate_calls for s in c["params"].row_seeds]
    assert len(set(s1)) == len(s1) and not set(s1) & set(s2)
    assert all(c["params"].seed is None for c in b1.generate_calls)  # no per-call seed beside the row seeds
    assert {key_seed(1, c.sample_id, 0) for c in r1.calls} <= set(s1)  # every call's first turn


@pytest.mark.parametrize(("n_candidates", "workflow"),
                         [(5, "cascade"), (1, "cascade"), (5, "hierarchy"), (1, "hierarchy")])
def test_answerer_candidates(n_candidates, workflow):
    rollout, _, _ = _run(workflow, TeamScript(), n_questions=2, n_traj=2, n_candidates=n_candidates)
    for traj in rollout.trajectories:
        answers = traj.calls_of("answerer")
        assert [c.candidate_id for c in answers] == list(range(n_candidates))
        assert len({c.call_id for c in answers}) == 1 and len({c.prompt_text for c in answers}) == 1
        assert {c.request_id for c in answers} == {f"{traj.trajectory_id}/a0"}
        assert all(c.is_final_request for c in answers)
        assert traj.final_answer == "paris" and traj.has_final_answer


# ---------------------------------------------------------------- cascade budget


def test_cascade_normal_run():
    rollout, _, retriever = _run("cascade", TeamScript(n_searches=2, report="zebra found"))
    traj = rollout.trajectories[0]
    (searcher,) = traj.calls_of("searcher")
    assert (searcher.n_search, searcher.reported, searcher.report, searcher.n_turns) == (2, True, "zebra found", 3)
    assert searcher.agent_id == "searcher-0-0" and searcher.wave == -1
    assert searcher.task == traj.question  # the cascade's task is the question
    assert traj.c_tool == 2 and not traj.forced_answer and traj.steps == 4
    assert "R1 [what is the capital of place 0?] zebra found" in _answerer_prompt(traj)
    assert len(retriever.calls) == 2


def test_cascade_stops_after_five_steps_and_forces_the_answer():
    rollout, _, retriever = _run("cascade", TeamScript(n_searches=100), max_searcher_turns=100)
    traj = rollout.trajectories[0]
    (searcher,) = traj.calls_of("searcher")
    assert searcher.n_turns == 5 and searcher.n_search == 5 and searcher.cut and not searcher.reported
    assert traj.c_tool == 5 and traj.forced_answer and traj.has_final_answer
    assert len(retriever.calls) == 4  # the search of the last step is never run
    assert max(c.step for c in traj.calls if c.role == "searcher") == 0
    assert traj.calls_of("answerer")[0].step == 5 and traj.steps == 6
    assert _answerer_prompt(traj).count("\nR1 [") == 1


def test_cascade_searcher_turn_limit():
    rollout, _, _ = _run("cascade", TeamScript(n_searches=100), max_searcher_turns=2)
    traj = rollout.trajectories[0]
    assert traj.calls_of("searcher")[0].n_turns == 2 and traj.forced_answer and traj.steps == 3


def test_cascade_malformed_searcher_ends_with_empty_report_and_forced_answer():
    rollout, _, retriever = _run("cascade", TeamScript(searcher_text="<search> </search>"))
    traj = rollout.trajectories[0]
    (searcher,) = traj.calls_of("searcher")
    assert searcher.malformed and searcher.malformation == "empty_query" and searcher.report == ""
    assert traj.forced_answer and traj.c_tool == 0 and traj.search_actions == 0
    assert retriever.calls == []


# ---------------------------------------------------------------- hierarchy budget


def test_hierarchy_normal_run():
    rollout, _, _ = _run("hierarchy", TeamScript(n_searches=1, n_waves=2, tasks_per_wave=3))
    traj = rollout.trajectories[0]
    searchers = traj.calls_of("searcher")
    assert [c.agent_id for c in searchers] == [f"searcher-{w}-{s}" for w in range(2) for s in range(3)]
    assert [c.wave for c in searchers] == [0, 0, 0, 1, 1, 1]
    leaders = traj.calls_of("leader")
    assert [c.action for c in leaders] == ["dispatch", "dispatch", "answer_with"]
    assert [c.wave for c in leaders] == [0, 1, 2] and [c.step for c in leaders] == [0, 3, 6]
    assert ("R6 [part 5 of" in leaders[-1].prompt_text
            and leaders[-1].response_text.startswith("<answer_with>R1,R2,R3,R4,R5,R6"))
    assert traj.waves == 2 and traj.c_tool == 2 and traj.search_actions == 6 and not traj.forced_answer


def test_leader_that_dispatches_forever_is_stopped_after_five_waves():
    rollout, _, _ = _run("hierarchy", TeamScript(n_searches=0, n_waves=100, tasks_per_wave=1))
    traj = rollout.trajectories[0]
    assert traj.waves == 5 and len(traj.calls_of("leader")) == 5 and len(traj.calls_of("searcher")) == 5
    assert all(c.action == "dispatch" for c in traj.calls_of("leader"))
    assert traj.forced_answer and traj.steps == 11  # 5 x (Leader + Searcher) + Answerer
    assert all(f"R{i} [part {i - 1} of" in _answerer_prompt(traj) for i in range(1, 6))


def test_hierarchy_step_budget_cuts_searchers_and_forces_the_answer():
    rollout, _, retriever = _run("hierarchy", TeamScript(n_searches=100, tasks_per_wave=2), max_searcher_turns=100)
    traj = rollout.trajectories[0]
    searchers = traj.calls_of("searcher")
    assert len(searchers) == 2 and all(c.cut and c.n_search == 11 and c.n_turns == 11 for c in searchers)
    assert traj.c_tool == 11 and traj.search_actions == 22 and traj.forced_answer
    assert max(c.step for c in traj.calls if c.role != "answerer") <= 11
    assert traj.calls_of("answerer")[0].step == 12 and len(retriever.calls) == 10


def test_hierarchy_budget_ends_the_dispatch_loop():
    rollout, _, _ = _run("hierarchy", TeamScript(n_searches=1, n_waves=100, tasks_per_wave=1))
    traj = rollout.trajectories[0]
    # each wave takes three steps (Leader, search, report): four waves fill the 12 steps
    assert traj.waves == 4 and traj.forced_answer and traj.c_tool == 4
    assert traj.calls_of("searcher")[-1].step == 10  # started at step 10, continued at step 11
    assert traj.calls_of("answerer")[0].step == 12 and traj.steps == 13


def test_dispatch_on_the_last_step_runs_no_searcher():
    rollout, _, _ = _run("hierarchy", TeamScript(), hierarchy_steps=1)
    traj = rollout.trajectories[0]
    assert traj.waves == 1 and traj.calls_of("searcher") == [] and traj.forced_answer
    assert "Reports:\n(none)" in _answerer_prompt(traj)


@pytest.mark.parametrize("max_parallel", [2, 3])
def test_at_most_max_parallel_tasks(max_parallel):
    rollout, _, _ = _run("hierarchy", TeamScript(tasks_per_wave=3), max_parallel=max_parallel)
    traj = rollout.trajectories[0]
    leader = traj.calls_of("leader")[0]
    if max_parallel == 2:
        assert leader.malformation == "too_many_tasks" and traj.forced_answer
        assert traj.calls_of("searcher") == []
    else:
        assert not leader.malformed and len(traj.calls_of("searcher")) == 3
    assert f"1 to {max_parallel} tasks" in leader.prompt_text


def test_c_tool_counts_steps_not_searches():
    team = TeamScript(tasks_per_wave=2)

    def script(context: str) -> str:
        if role_of(context) == "searcher":  # slot 0 searches three times, slot 1 once
            turn = context.count("<information>")
            wanted = 3 if field_of(context, "Task").startswith("part 0") else 1
            return f"<search>q{turn}</search>" if turn < wanted else "<report>r</report>"
        return team(context)

    rollout, _, retriever = _run("hierarchy", script)
    traj = rollout.trajectories[0]
    assert traj.search_actions == 4 and traj.c_tool == 3
    assert [len(c) for c in retriever.calls] == [2, 1, 1]


# ---------------------------------------------------------------- malformed roles


def test_malformed_searcher_in_hierarchy_does_not_stop_the_wave():
    team = TeamScript(n_searches=1, tasks_per_wave=2)

    def script(context: str) -> str:
        if role_of(context) == "searcher" and field_of(context, "Task").startswith("part 1"):
            return "I think <search>q</search>"
        return team(context)

    rollout, _, _ = _run("hierarchy", script)
    traj = rollout.trajectories[0]
    bad, good = sorted(traj.calls_of("searcher"), key=lambda c: not c.malformed)
    assert bad.malformation == "text_before_action" and bad.report == "" and bad.n_search == 0
    assert good.reported and not good.malformed
    assert not traj.forced_answer and traj.calls_of("leader")[-1].action == "answer_with"
    assert "R2 [part 1 of what is the capital of place 0?] \n" in traj.calls_of("leader")[-1].prompt_text


@pytest.mark.parametrize(
    ("leader_text", "kind"),
    [("<answer>paris</answer>", "wrong_role_action"), ("<answer_with>R7</answer_with>", "unknown_report_id"),
     ("<dispatch><task>a</task>", "no_closed_tag")],
)
def test_malformed_leader_goes_to_the_forced_answerer(leader_text, kind):
    rollout, _, _ = _run("hierarchy", TeamScript(leader_text=leader_text))
    traj = rollout.trajectories[0]
    (leader,) = traj.calls_of("leader")
    assert leader.malformed and leader.malformation == kind and leader.action == ""
    assert traj.forced_answer and traj.calls_of("searcher") == [] and traj.has_final_answer


def test_empty_answer_with_is_wellformed():
    rollout, _, _ = _run("hierarchy", TeamScript(n_waves=0))
    traj = rollout.trajectories[0]
    assert traj.calls_of("leader")[0].action == "answer_with" and not traj.forced_answer
    assert "Reports:\n(none)" in _answerer_prompt(traj)


def test_malformed_answerer_has_no_final_answer():
    rollout, _, _ = _run("cascade", TeamScript(answerer_text="paris"), n_candidates=1)
    traj = rollout.trajectories[0]
    (answer,) = traj.calls_of("answerer")
    assert answer.malformed and answer.malformation == "no_action" and answer.answer == ""
    assert not traj.has_final_answer and traj.final_answer == "" and traj.last_answerer_output == "paris"


# ---------------------------------------------------------------- contexts, limits and counts


def test_searcher_continues_on_exactly_its_context():
    rollout, backend, _ = _run("cascade", TeamScript(n_searches=2, think=True, trailing=" junk <answer>x</answer>"))
    (searcher,) = rollout.trajectories[0].calls_of("searcher")
    assert [s.source for s in searcher.segments] == ["generated", "observation"] * 2 + ["generated"]
    seen = [c for c in backend.contexts if role_of(c) == "searcher"]
    expected = [searcher.prompt_text + "".join(s.text for s in searcher.segments[: 2 * i]) for i in range(3)]
    assert seen == expected
    assert all(s.text.endswith(("</search>", "</report>")) for s in searcher.segments if s.source == "generated")
    assert searcher.segments[1].text.startswith('\n\n<information>Doc 1(Title: "')
    assert searcher.segments[1].text.endswith("</information>\n\n")


def test_input_and_output_token_counts():
    rollout, backend, _ = _run("hierarchy", TeamScript(n_searches=2, n_waves=2), n_questions=2, n_traj=2)
    total_in = sum(t.input_tokens for t in rollout.trajectories)
    assert total_in == sum(len(backend.encode_prompt(c)) for c in backend.contexts)
    total_out = sum(t.output_tokens for t in rollout.trajectories)
    assert total_out == sum(len(s.token_ids) for c in rollout.calls for s in c.segments if s.source == "generated")
    (searcher, *_) = rollout.trajectories[0].calls_of("searcher")
    turn_lengths = [len(searcher.prompt_ids) + sum(len(s.token_ids) for s in searcher.segments[: 2 * i])
                    for i in range(3)]
    assert searcher.input_tokens == sum(turn_lengths)


def test_generations_are_cut_to_the_role_limit():
    rollout, backend, _ = _run("cascade", TeamScript(n_searches=1), searcher_max_new_tokens=10,
                               answerer_max_new_tokens=100)
    (searcher,) = rollout.trajectories[0].calls_of("searcher")
    assert len(searcher.response_ids) == 10 and searcher.finish_reason == "length"
    assert searcher.malformation == "no_closed_tag"
    assert backend.generate_calls[0]["params"].max_new_tokens == 10
    assert backend.generate_calls[1]["params"].max_new_tokens == 100


def test_long_limits_of_other_roles_in_the_tick_do_not_leak():
    cfg = dict(leader_max_new_tokens=400, searcher_max_new_tokens=12)
    rollout, backend, _ = _run("hierarchy", TeamScript(n_searches=1), **cfg)
    searchers = rollout.trajectories[0].calls_of("searcher")
    assert searchers and all(len(c.response_ids) <= 12 for c in searchers)


# ---------------------------------------------------------------- inputs


def test_accepts_split_rows_with_id_and_array_answers():
    frame = pd.DataFrame(
        {"id": ["a", "b"], "question": ["q one?", "q two?"], "golden_answers": [np.array(["x"]), np.array(["y", "z"])],
         "dataset": ["nq", "hotpotqa"]}
    )
    rollout = run_cascade(frame, FakeBackend(TeamScript()), FakeRetriever(), _cfg(), n_traj=3, seed=0)
    assert [t.trajectory_id for t in rollout.trajectories] == [f"{q}/t{k}" for q in "ab" for k in range(3)]
    assert rollout.trajectories[3].golden_answers == ["y", "z"] and rollout.trajectories[3].dataset == "hotpotqa"


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question": "q", "golden_answers": ["a"]}], "question_id"),
        ([{"question_id": "a", "question": " ", "golden_answers": ["a"]}], "'question'"),
        ([{"question_id": "a", "question": "q", "golden_answers": "a"}], "golden_answers"),
        ([{"question_id": "a", "question": "q", "golden_answers": ["a"]}] * 2, "duplicate"),
    ],
)
def test_bad_questions_raise_input_error(rows, message):
    with pytest.raises(InputError, match=message):
        run_hierarchy(rows, FakeBackend(TeamScript()), FakeRetriever(), _cfg(), n_traj=1, seed=0)


@pytest.mark.parametrize(("field", "value"),
                         [("cascade_steps", 0), ("top_k", 1.5), ("top_p", 0.0), ("temperature", -1)])
def test_bad_config_raises_input_error(field, value):
    with pytest.raises(InputError, match=field):
        workflow_cfg(**{field: value})
