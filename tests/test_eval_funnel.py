"""Where the points go: the funnel of one workflow (pipeline.eval.funnel), its sums and the paired
bootstrap of a per-call rate (pipeline.eval.funnel_metrics)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from pipeline.agents.trajectory import Call, Rollout, Trajectory
from pipeline.agents.workflows import run_hierarchy
from pipeline.errors import InputError
from pipeline.eval.bootstrap import dataset_draws
from pipeline.eval.funnel import holds, trajectory_funnel, words
from pipeline.eval.funnel_metrics import BY_KEY, funnel_steps, funnel_table, paired_rate_gap, role_table
from pipeline.eval.scoring import score_rollout
from pipeline.retrieval.base import Passage
from tests.helpers.configs import workflow_cfg
from tests.helpers.fakes import FakeBackend, FakeRetriever, TeamScript, make_questions


def _searcher(call_id: int, wave: int, task: str, passages: list[Passage], report: str, report_id: str) -> Call:
    return Call(sample_id=f"q/t0/c{call_id}", role="searcher", call_id=call_id, agent_id=f"searcher-{wave}-0",
                step=call_id, wave=wave, prompt_ids=[1], prompt_text="", task=task, report=report,
                reported=bool(report), passages=passages, report_id=report_id, n_search=len(passages) // 2 or 1)


def _answerer(answer: str) -> Call:
    return Call(sample_id="q/t0/c9/k0", role="answerer", call_id=9, agent_id="answerer", step=5, wave=2,
                prompt_ids=[1], prompt_text="", request_id="q/t0/a0", candidate_id=0, is_final_request=True,
                action="answer", answer=answer,
                segments=[])


def _two_hop(handed: list[str], forced: bool = False) -> Trajectory:
    """Where was the director of Film X born? Bob Ray directed it; he was born in Lyon."""
    calls = [
        _searcher(0, 0, "who directed Film X", [Passage("a", "Film X", "Film X was directed by Bob Ray."),
                                               Passage("b", "Book", "A book about nothing.")],
                  "Bob Ray directed it", "R1"),
        _searcher(1, 0, "where was the director born", [Passage("c", "Lyon", "Lyon is a city.")], "", "R2"),
        _searcher(2, 1, "where was Bob Ray born", [Passage("d", "Bob Ray", "Bob Ray was born in Lyon City.")],
                  "he was born in lyon", "R3"),
        _answerer("Lyon"),
    ]
    return Trajectory("q/t0", "q", "hierarchy", "hotpotqa", "Where was the director of Film X born?",
                      ["Lyon", "Lyon City"], hops=[{"question": "who directed Film X", "answer": "Bob Ray"},
                                                   {"question": "where was Bob Ray born", "answer": "Lyon"}],
                      family="bridge", calls=calls, waves=2, forced_answer=forced, handed=handed)


def test_whole_words_only():
    assert holds(words("The Bo Ray, a book."), ["bo ray"])
    assert holds(words("Bo-Ray"), ["BoRay"])  # the EM scorer drops punctuation without a space
    assert not holds(words("a book"), ["Bo"])
    assert not holds(words("anything"), ["The", "!!"])  # aliases that normalise to nothing match nothing


def test_a_hand_built_two_hop_workflow():
    row = trajectory_funnel(_two_hop(handed=["R1", "R3"]))
    assert row["n_hops"] == 2 and row["family"] == "bridge"
    assert row["hop_retrieved"] == [True, True]
    assert row["hop_reported"] == [True, True]
    assert row["hop_handed"] == [True, True]
    assert (row["answer_retrieved"], row["answer_reported"], row["handed"]) == (True, True, True)
    # call 0 read Bob Ray and kept it; call 1 read Lyon and reported nothing; call 2 read Lyon
    # (Bob Ray is named by its own task, so it is no news) and kept it
    assert (row["searcher_calls"], row["searcher_calls_read"], row["searcher_calls_kept"]) == (3, 3, 2)
    assert row["leader_waves"] == 2 and row["bridge_used"] is True
    assert row["handed_reports"] == [0, 2]
    assert row["searcher_passage_ids"] == [["a", "b"], ["c"], ["d"]]
    assert row["searcher_waves"] == [0, 0, 1]


def test_a_hand_off_that_leaves_out_the_answer():
    row = trajectory_funnel(_two_hop(handed=["R2"]))
    assert row["hop_handed"] == [False, False] and row["handed"] is False
    assert row["answer_reported"] is True  # it was in a report, just not one the Answerer got


def test_a_forced_answer_is_handed_every_report():
    """The team records what the Answerer saw: with a forced answer, every report so far."""
    script = TeamScript(n_searches=1, report="paris is the capital", tasks_per_wave=1,
                        leader_text="<dispatch><task>the capital</task></dispatch>")
    rollout = run_hierarchy(make_questions(1), FakeBackend(script), FakeRetriever(),
                            workflow_cfg(n_candidates=1, max_waves=2), n_traj=1, seed=0)
    traj = rollout.trajectories[0]
    assert traj.forced_answer and traj.handed == ["R1", "R2"]
    row = trajectory_funnel(traj)
    assert row["handed_reports"] == [0, 1] and row["handed"] is True  # "paris" is a gold alias
    assert row["hop_retrieved"] is None  # make_questions has no hops: the answer level only
    assert row["answer_retrieved"] is True  # the fake corpus holds "Paris is the capital of France."
    assert (row["searcher_calls"], row["searcher_calls_read"], row["searcher_calls_kept"]) == (2, 2, 2)


def test_a_real_data_row_without_hops_gets_the_answer_level_funnel():
    traj = _two_hop(handed=["R1"])
    traj.hops, traj.family = None, ""
    row = trajectory_funnel(traj)
    assert row["hop_retrieved"] is None and row["hop_reported"] is None and row["hop_handed"] is None
    assert row["n_hops"] is None and row["family"] is None and row["bridge_used"] is None
    assert (row["answer_retrieved"], row["answer_reported"], row["handed"]) == (True, True, False)
    # targets are the gold aliases: calls 1 and 2 read Lyon, call 2 kept it
    assert (row["searcher_calls_read"], row["searcher_calls_kept"]) == (2, 1)


def test_a_comparison_has_no_bridge_and_needs_every_hop():
    traj = _two_hop(handed=["R1", "R3"])
    traj.family, traj.golden_answers = "comparison", ["yes"]
    row = trajectory_funnel(traj)
    assert row["bridge_used"] is None
    steps = funnel_steps(pd.DataFrame([{"system": "s", "dataset": "hotpotqa", "question_id": "q",
                                        "strict_correct": False, "search_actions": 3, **row}]))
    assert steps.loc[0, "category"] == "comparison"
    assert steps.loc[0, ["retrieved", "reported", "handed"]].tolist() == [True, True, True]
    assert steps.loc[0, "lost"] == "Answerer"


def test_records_carry_the_funnel_through_the_scorer():
    rollout = Rollout("hierarchy", workflow_cfg(n_candidates=1), 0, "v", [_two_hop(["R1"]), _two_hop(["R3"])])
    records = score_rollout(rollout, "h_mas_base")
    assert records["handed"].tolist() == [False, True]
    assert records["n_hops"].dtype == "Int64" and records["bridge_used"].dtype == "boolean"
    assert records["strict_correct"].tolist() == [False, False]  # no Answerer output text: a format failure


def _record(system, qid, dataset, run, correct, read, kept, searches=1, calls=1, handed=True, retrieved=True,
            reported=True):
    return {"system": system, "question_id": qid, "dataset": dataset, "run": run, "strict_correct": correct,
            "search_actions": searches, "searcher_calls": calls, "searcher_calls_read": read,
            "searcher_calls_kept": kept, "answer_retrieved": retrieved, "answer_reported": reported,
            "handed": handed, "leader_waves": 0, "workflow": "cascade", "family": "single-hop", "n_hops": 1}


def test_funnel_table_places_each_wrong_workflow_at_its_first_failed_step():
    records = pd.DataFrame([
        _record("s", "q1", "nq", 0, True, 1, 1),
        _record("s", "q2", "nq", 0, False, 0, 0, retrieved=False, reported=False, handed=False),
        _record("s", "q3", "nq", 0, False, 1, 0, reported=False, handed=False),
        _record("s", "q4", "nq", 0, False, 1, 1, handed=False),
        _record("s", "q5", "nq", 0, False, 1, 1),
        _record("s", "q6", "nq", 0, True, 0, 0, retrieved=False, reported=False, handed=False),  # a lucky guess
    ])
    row = funnel_table(records, ["s"]).set_index("category").loc["single-hop"]
    assert row["workflows"] == 6
    assert row["correct"] == pytest.approx(100 * 2 / 6)
    for name, count in (("retrieval", 1), ("report", 1), ("hand-off", 1), ("Answerer", 1)):
        assert row[f"lost at {name}"] == pytest.approx(100 * count / 6)
    assert row["retrieved"] == pytest.approx(100 * 4 / 6) and row["handed"] == pytest.approx(100 * 2 / 6)
    roles = role_table(records, ["s"]).iloc[0]
    assert roles["searcher_fidelity"] == pytest.approx(100 * 3 / 4)
    assert roles["answerer_accuracy_given_handed"] == pytest.approx(100 * 1 / 2)
    assert roles["leader_waves_per_workflow"] is None


def _brute_force_gap(records, target, baseline, rate, draws, seed, level):
    """Loop by loop: resample questions per dataset, sum each system's numerator and denominator
    over the drawn questions' runs, take the ratio."""
    datasets = sorted(records["dataset"].unique())
    questions = {d: sorted(records.loc[records["dataset"] == d, "question_id"].unique()) for d in datasets}
    num, den = rate.parts(records)
    frame = records.assign(num=num, den=den)
    sums = {(s, q): (frame[(frame["system"] == s) & (frame["question_id"] == q)]["num"].sum(),
                     frame[(frame["system"] == s) & (frame["question_id"] == q)]["den"].sum())
            for s in (target, baseline) for d in datasets for q in questions[d]}
    draws_by_dataset = list(dataset_draws(np.array([len(questions[d]) for d in datasets]), draws, seed))
    diffs = []
    for b in range(draws):
        ratio = {}
        for s in (target, baseline):
            n = sum(sums[(s, questions[d][i])][0] for k, d in enumerate(datasets) for i in draws_by_dataset[k][b])
            m = sum(sums[(s, questions[d][i])][1] for k, d in enumerate(datasets) for i in draws_by_dataset[k][b])
            ratio[s] = None if m == 0 else n / m * rate.scale()
        if None not in ratio.values():
            diffs.append(ratio[target] - ratio[baseline])
    tail = (1 - level) / 2 * 100
    observed = {s: sum(v[0] for (t, _), v in sums.items() if t == s) / sum(v[1] for (t, _), v in sums.items() if t == s)
                for s in (target, baseline)}
    return ((observed[target] - observed[baseline]) * rate.scale(), *np.percentile(diffs, [tail, 100 - tail]))


def test_the_bootstrap_of_a_per_call_rate_matches_a_brute_force_loop():
    rng = np.random.default_rng(3)
    rows = []
    for dataset, n in (("nq", 5), ("hotpotqa", 4), ("bamboogle", 3)):
        for q in range(n):
            for run in range(2):
                for system in ("a", "b"):
                    read = int(rng.integers(0, 3))
                    rows.append(_record(system, f"{dataset}-{q}", dataset, run, bool(rng.integers(0, 2)), read,
                                        int(rng.integers(0, read + 1)), searches=int(rng.integers(0, 4)),
                                        calls=int(rng.integers(1, 3)), handed=bool(rng.integers(0, 2))))
    records = pd.DataFrame(rows)
    for key in BY_KEY:
        got = paired_rate_gap(records, "a", "b", BY_KEY[key], draws=300, seed=11, level=0.9)
        want = _brute_force_gap(records, "a", "b", BY_KEY[key], 300, 11, 0.9)
        assert [got["diff"], got["low"], got["high"]] == pytest.approx(list(want)), key


def test_the_rate_gap_needs_the_same_questions_and_a_denominator():
    records = pd.DataFrame([_record("a", "q1", "nq", 0, True, 1, 1), _record("b", "q2", "nq", 0, True, 1, 1)])
    with pytest.raises(InputError, match="same questions"):
        paired_rate_gap(records, "a", "b", BY_KEY["searcher_fidelity"], draws=10, seed=0, level=0.95)
    records = pd.DataFrame([_record("a", "q1", "nq", 0, True, 0, 0), _record("b", "q1", "nq", 0, True, 1, 1)])
    assert paired_rate_gap(records, "a", "b", BY_KEY["searcher_fidelity"], draws=10, seed=0, level=0.95) is None
