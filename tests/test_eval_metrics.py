"""avg@4 / pass@4 / all@4, macro, workload and behaviour on hand-made records."""

from __future__ import annotations

import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.eval.metrics import behaviour, macro_metrics, per_dataset_metrics, workload
from pipeline.eval.records import per_question_scores
from tests.helpers.configs import EVAL

# system -> (dataset, question_id) -> strict correctness of runs 0..3
CORRECT = {
    "opd": {
        ("nq", "q1"): [1, 1, 1, 1],
        ("nq", "q2"): [1, 0, 0, 0],
        ("nq", "q3"): [0, 0, 0, 0],
        ("bamboogle", "q4"): [1, 1, 0, 0],
    },
    "critic": {
        ("nq", "q1"): [0, 0, 0, 0],
        ("nq", "q2"): [1, 1, 1, 1],
        ("nq", "q3"): [0, 1, 0, 1],
        ("bamboogle", "q4"): [0, 0, 0, 0],
    },
}


def make_records(correct: dict = CORRECT) -> pd.DataFrame:
    rows = []
    for system, questions in correct.items():
        for (dataset, qid), runs in questions.items():
            for run, c in enumerate(runs):
                rows.append(
                    {
                        "system": system, "question_id": qid, "dataset": dataset, "run": run,
                        "strict_correct": bool(c), "flexible_correct": bool(c),
                        "format_failure": False, "search_actions": 2, "input_tokens": 100,
                        "output_tokens": 10, "has_subtask_and_report": True,
                        "has_final_answer": True, "forced_answer": False,
                    }
                )
    return pd.DataFrame(rows)


def row(table: pd.DataFrame, **keys) -> pd.Series:
    mask = pd.Series(True, index=table.index)
    for key, value in keys.items():
        mask &= table[key] == value
    assert mask.sum() == 1
    return table[mask].iloc[0]


def test_per_dataset_metrics_by_hand() -> None:
    table = per_dataset_metrics(make_records(), runs=EVAL.runs)
    nq = row(table, system="opd", dataset="nq")
    assert nq["n_questions"] == 3
    assert nq["avg@4"] == pytest.approx(100 * (1 + 0.25 + 0) / 3)
    assert nq["pass@4"] == pytest.approx(100 * 2 / 3)
    assert nq["all@4"] == pytest.approx(100 * 1 / 3)
    bam = row(table, system="opd", dataset="bamboogle")
    assert (bam["avg@4"], bam["pass@4"], bam["all@4"]) == pytest.approx((50, 100, 0))
    critic_nq = row(table, system="critic", dataset="nq")
    assert critic_nq["avg@4"] == pytest.approx(100 * (0 + 1 + 0.5) / 3)


def test_macro_is_unweighted_over_datasets_not_pooled() -> None:
    macro = macro_metrics(make_records(), runs=EVAL.runs)
    opd = row(macro, system="opd")
    assert opd["n_datasets"] == 2
    assert opd["avg@4"] == pytest.approx((100 * 1.25 / 3 + 50) / 2)  # pooled would be 43.75
    assert opd["pass@4"] == pytest.approx((100 * 2 / 3 + 100) / 2)
    assert opd["all@4"] == pytest.approx((100 / 3 + 0) / 2)
    critic = row(macro, system="critic")
    assert critic["avg@4"] == pytest.approx((50 + 0) / 2)


def test_metrics_use_the_named_correctness_column() -> None:
    records = make_records()
    records["flexible_correct"] = True
    table = per_dataset_metrics(records, correct_col="flexible_correct", runs=EVAL.runs)
    assert (table["avg@4"] == 100).all()
    assert row(per_dataset_metrics(records, runs=EVAL.runs), system="opd", dataset="bamboogle")["avg@4"] == 50


def test_row_order_does_not_matter() -> None:
    records = make_records()
    shuffled = records.sample(frac=1.0, random_state=3).reset_index(drop=True)
    pd.testing.assert_frame_equal(macro_metrics(records, runs=EVAL.runs), macro_metrics(shuffled, runs=EVAL.runs))


def test_macro_with_required_datasets() -> None:
    records = make_records()
    only_nq = macro_metrics(records, datasets=["nq"], runs=EVAL.runs)
    assert row(only_nq, system="opd")["avg@4"] == pytest.approx(100 * 1.25 / 3)
    with pytest.raises(InputError, match="musique"):
        macro_metrics(records, datasets=["nq", "musique"], runs=EVAL.runs)


def test_missing_column_is_named() -> None:
    with pytest.raises(InputError, match="strict_correct"):
        per_dataset_metrics(make_records().drop(columns="strict_correct"), runs=EVAL.runs)
    with pytest.raises(InputError, match="output_tokens"):
        workload(make_records().drop(columns="output_tokens"))


def test_wrong_number_of_runs_names_the_question() -> None:
    records = make_records()
    records = records[~((records["question_id"] == "q2") & (records["run"] == 3))]
    with pytest.raises(InputError, match=r"'q2'.*3 runs.*expected 4"):
        per_dataset_metrics(records, runs=EVAL.runs)
    assert len(per_dataset_metrics(make_records(), runs=4)) == 4
    with pytest.raises(InputError, match="expected 5"):
        per_dataset_metrics(make_records(), runs=5)


def test_repeated_run_and_split_dataset_are_rejected() -> None:
    records = make_records()
    records.loc[records.index[1], "run"] = 0
    with pytest.raises(InputError, match="'run'"):
        per_dataset_metrics(records, runs=EVAL.runs)
    records = make_records()
    records.loc[records.index[0], "dataset"] = "popqa"
    with pytest.raises(InputError, match="'dataset'"):
        per_dataset_metrics(records, runs=EVAL.runs)


def test_correctness_must_be_boolean() -> None:
    records = make_records()
    records["strict_correct"] = records["strict_correct"].astype(int) * 2
    with pytest.raises(InputError, match="strict_correct"):
        per_dataset_metrics(records, runs=EVAL.runs)
    records = make_records()
    records["strict_correct"] = records["strict_correct"].astype(int)  # 0/1 is fine
    assert row(per_dataset_metrics(records, runs=EVAL.runs), system="opd", dataset="bamboogle")["avg@4"] == 50


def test_per_question_scores() -> None:
    scores = per_question_scores(make_records(), runs=EVAL.runs)
    q2 = row(scores, system="opd", question_id="q2")
    assert q2["score"] == 0.25 and q2["any_correct"] and not q2["all_correct"]


def test_workload_by_hand() -> None:
    records = make_records()
    opd = records["system"] == "opd"
    records.loc[opd, "search_actions"] = [0, 1, 2, 3] * 4  # mean 1.5
    records.loc[opd, "input_tokens"] = range(16)  # mean 7.5
    table = workload(records)
    got = row(table, system="opd")
    assert got["n_workflows"] == 16
    assert (got["search_actions"], got["input_tokens"], got["output_tokens"]) == (1.5, 7.5, 10)
    assert row(table, system="critic")["search_actions"] == 2


def test_workload_rejects_negative_counts() -> None:
    records = make_records()
    records.loc[0, "input_tokens"] = -1
    with pytest.raises(InputError, match="input_tokens"):
        workload(records)


def test_behaviour_by_hand() -> None:
    records = make_records()
    opd = records["system"] == "opd"
    bam_opd = opd & (records["dataset"] == "bamboogle")
    # 2 of the 4 bamboogle workflows fail the format; nq (12 workflows) has none.
    failed = bam_opd & records["run"].isin([2, 3])
    records.loc[failed, "format_failure"] = True
    records.loc[failed, "has_final_answer"] = False
    records.loc[bam_opd & (records["run"] == 2), "flexible_correct"] = True  # rescued
    records.loc[opd & (records["question_id"] == "q1"), "search_actions"] = 0
    records.loc[opd & (records["question_id"] == "q3"), "has_subtask_and_report"] = False
    records.loc[opd & (records["run"] == 0), "forced_answer"] = True

    table = behaviour(records, runs=EVAL.runs)
    got = row(table, system="opd")
    assert got["n_workflows"] == 16
    assert got["no_search_share"] == pytest.approx(100 * 4 / 16)
    assert got["subtask_and_report_share"] == pytest.approx(100 * 12 / 16)
    assert got["final_answer_share"] == pytest.approx(100 * 14 / 16)
    assert got["forced_answer_share"] == pytest.approx(100 * 4 / 16)
    assert got["format_failure_rate_macro"] == pytest.approx((0 + 50) / 2)
    assert got["format_failure_rate_pooled"] == pytest.approx(100 * 2 / 16)
    assert got["rescued_by_flexible"] == 1
    assert got["rescued_by_flexible_share"] == pytest.approx(100 / 16)
    critic = row(table, system="critic")
    assert critic["format_failure_rate_macro"] == 0 and critic["rescued_by_flexible"] == 0
