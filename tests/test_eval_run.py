"""The resumable 4-run evaluation (pipeline.eval.run) and the `evaluate` stage, with fakes."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.eval.funnel import FUNNEL_COLUMNS
from pipeline.eval.run import evaluate_system, shard_path, shard_seed
from pipeline.eval.scoring import RECORD_COLUMNS, run_of
from tests.helpers.configs import workflow_cfg
from tests.helpers.fakes import FakeBackend, FakeRetriever, SeededBackend, TeamScript, field_of, make_questions, role_of

CFG = workflow_cfg(n_candidates=1, leader_max_new_tokens=400, searcher_max_new_tokens=300,
                   answerer_max_new_tokens=100)
CONTRACT = ["system", "question_id", "dataset", "run", "strict_answer", "flexible_answer", "strict_correct",
            "flexible_correct", "format_failure", "search_actions", "input_tokens", "output_tokens",
            "has_subtask_and_report", "has_final_answer", "forced_answer", "golden_answers",
            "last_answerer_output"]
# Answerer output by question number mod 4 (gold aliases: "paris", "Paris City").
ANSWERS = {
    0: "<answer>The Paris</answer>",  # strict and flexible right (article dropped)
    1: "<answer>London</answer>",  # well-formed, wrong
    2: "I think the answer is Paris City. Done",  # no tags: format failure, flexible right
    3: "no idea",  # format failure, no flexible answer
}


class Script:
    """TeamScript for Leader/Searchers; the Answerer's output depends on the question number."""

    def __init__(self) -> None:
        self.team = TeamScript(n_searches=1, tasks_per_wave=1)

    def __call__(self, context: str) -> str:
        if role_of(context) != "answerer":
            return self.team(context)
        number = int(re.search(r"place (\d+)", field_of(context, "Question")).group(1))
        return ANSWERS[number % 4]


class SeededScript(Script):
    """Script whose Answerer output also depends on the sampling draw (SeededBackend)."""

    def __call__(self, context: str, draw: int = 0) -> str:
        if role_of(context) != "answerer":
            return self.team(context)
        number = int(re.search(r"place (\d+)", field_of(context, "Question")).group(1))
        return ANSWERS[(number + draw) % 4]


def _evaluate(tmp_path, n=8, shard=3, backend=None, **kw):
    backend = backend or FakeBackend(Script())
    kw = {"system": "h_mas_base", "workflow": "hierarchy", "progress": False, **kw}
    return evaluate_system(make_questions(n), backend, FakeRetriever(), CFG, 4, shard, tmp_path, 7, **kw)


def test_one_record_per_question_and_run_with_contract_columns(tmp_path):
    result = _evaluate(tmp_path, n=8, shard=3)
    records = pd.read_parquet(tmp_path / "records.parquet")
    assert len(records) == 32 and result.shards == 3 and result.computed == 3
    assert not records.duplicated(["question_id", "run"]).any()
    assert set(CONTRACT) <= set(records.columns) and list(records.columns) == RECORD_COLUMNS + FUNNEL_COLUMNS
    assert sorted(records["run"].unique()) == [0, 1, 2, 3]
    assert (records["system"] == "h_mas_base").all() and (records["dataset"] == "nq").all()
    assert records.groupby("question_id").size().eq(4).all()


def test_strict_and_flexible_scoring_of_scripted_answers(tmp_path):
    records = _evaluate(tmp_path, n=8, shard=8).records
    number = records["question_id"].str.split("-").str[1].astype(int) % 4
    by = records.assign(kind=number).groupby("kind")
    first = by.first()
    assert first.loc[0, "strict_answer"] == "The Paris" and first.loc[1, "strict_answer"] == "London"
    assert first.loc[2, "flexible_answer"] == "Paris City" and pd.isna(first.loc[3, "flexible_answer"])
    assert by["strict_correct"].all().tolist() == [True, False, False, False]
    assert by["strict_correct"].any().tolist() == [True, False, False, False]
    assert by["flexible_correct"].all().tolist() == [True, False, True, False]
    assert by["format_failure"].all().tolist() == [False, False, True, True]
    assert by["format_failure"].any().tolist() == [False, False, True, True]
    assert pd.isna(records.loc[number == 2, "strict_answer"]).all()
    # behaviour and workload come from the trajectory (1 wave x 1 task x 1 search)
    assert (records["search_actions"] == 1).all() and records["has_subtask_and_report"].all()
    assert records["has_final_answer"].tolist() == (number <= 1).tolist()
    assert (records["input_tokens"] > 0).all() and (records["output_tokens"] > 0).all()
    assert not records["forced_answer"].any()


def test_runs_of_a_question_come_from_one_rollout_batched_across_questions(tmp_path):
    backend = FakeBackend(Script())
    _evaluate(tmp_path, n=5, shard=5, backend=backend)
    # the first tick holds the Leader call of every (question, run) of the shard
    assert backend.generate_calls[0]["batch"] == 5 * 4
    first = backend.generate_calls[0]["params"]
    assert first.seed is None and len(set(first.row_seeds)) == 5 * 4  # one seed per request


def test_shard_seeds_are_deterministic_and_distinct():
    seeds = {shard_seed(7, k) for k in range(100)}
    assert len(seeds) == 100 and shard_seed(7, 3) == shard_seed(7, 3)
    assert shard_seed(8, 3) != shard_seed(7, 3)


def test_two_systems_draw_the_same_random_numbers_per_request(tmp_path):
    """Common random numbers: the same policy evaluated under two system names gives the same
    records (so a paired gap carries no sampling noise of its own); another eval seed does not."""
    def answers(name, seed=7):
        return evaluate_system(make_questions(6), SeededBackend(SeededScript()), FakeRetriever(), CFG, 4, 3,
                               tmp_path / f"{name}-{seed}", seed, system=name, workflow="hierarchy",
                               progress=False).records["strict_answer"].tolist()

    a = answers("a")
    assert len(set(a)) > 1
    assert answers("b") == a
    assert answers("a", seed=8) != a


class Killed(RuntimeError):
    pass


def _seeded(tmp_path, **kw):
    return _evaluate(tmp_path, n=10, shard=3, backend=SeededBackend(SeededScript()), **kw)


def _kill_after_second(index, records):
    if index == 1:
        raise Killed()


def test_kill_after_k_shards_then_resume_loses_and_duplicates_nothing(tmp_path):
    """With a backend whose samples depend on the seed, so a resumed shard run with another
    seed than the uninterrupted run's would give other records. Killed after the last shard of
    the first block, the resumed run computes the second block only."""
    reference = _seeded(tmp_path / "clean", block_shards=2).records
    assert reference["strict_answer"].nunique() > 1  # the draws really change the answers
    with pytest.raises(Killed):
        _seeded(tmp_path / "run", on_shard=_kill_after_second, block_shards=2)
    assert shard_path(tmp_path / "run", 1).is_file() and not shard_path(tmp_path / "run", 2).exists()
    assert not (tmp_path / "run" / "records.parquet").exists()

    resumed_shards: list[int] = []
    result = _seeded(tmp_path / "run", on_shard=lambda i, r: resumed_shards.append(i), block_shards=2)
    assert resumed_shards == [2, 3] and result.reused == 2 and result.computed == 2
    records = pd.read_parquet(tmp_path / "run" / "records.parquet")
    assert len(records) == 40 and not records.duplicated(["question_id", "run"]).any()
    assert set(records["question_id"]) == {f"nq-{i}" for i in range(10)}
    pd.testing.assert_frame_equal(records, reference)


def test_a_block_cut_by_a_kill_is_computed_whole_again(tmp_path):
    reference = _seeded(tmp_path / "clean", block_shards=3).records
    with pytest.raises(Killed):
        _seeded(tmp_path / "run", on_shard=_kill_after_second, block_shards=3)
    assert shard_path(tmp_path / "run", 1).is_file() and not shard_path(tmp_path / "run", 2).exists()
    resumed_shards: list[int] = []
    result = _seeded(tmp_path / "run", on_shard=lambda i, r: resumed_shards.append(i), block_shards=3)
    assert resumed_shards == [0, 1, 2, 3] and (result.computed, result.reused) == (4, 0)
    pd.testing.assert_frame_equal(result.records, reference)


def test_the_resume_check_catches_a_shard_run_with_another_seed(tmp_path, monkeypatch):
    """The comparison above can fail: resumed shards seeded one shard off differ from the reference."""
    from pipeline.eval import run

    reference = _seeded(tmp_path / "clean").records
    with pytest.raises(Killed):
        _seeded(tmp_path / "run", on_shard=_kill_after_second, block_shards=2)
    monkeypatch.setattr(run, "shard_seed", lambda seed, shard: shard_seed(seed, shard + 1))
    records = _seeded(tmp_path / "run", block_shards=2).records
    assert len(records) == len(reference)
    assert not records.equals(reference)


def test_fingerprint_mismatch_discards_old_shards(tmp_path):
    first = _evaluate(tmp_path, n=6, shard=2, fingerprint_extra={"model": "a"})
    assert first.computed == 3
    again = _evaluate(tmp_path, n=6, shard=2, fingerprint_extra={"model": "a"})
    assert (again.computed, again.reused) == (0, 3)
    changed = _evaluate(tmp_path, n=6, shard=2, fingerprint_extra={"model": "b"})
    assert (changed.computed, changed.reused) == (3, 0)
    stored = json.loads((tmp_path / "shards" / "fingerprint.json").read_text())
    assert stored["parts"]["extra"] == {"model": "b"}
    seeded = _evaluate(tmp_path, n=6, shard=2, fingerprint_extra={"model": "b"}, system="prompted_critic")
    assert seeded.computed == 3  # another system (hence seeds) is another fingerprint


def test_a_damaged_shard_is_recomputed(tmp_path):
    _evaluate(tmp_path, n=4, shard=2, block_shards=1)
    shard_path(tmp_path, 1).write_bytes(b"not parquet")
    result = _evaluate(tmp_path, n=4, shard=2, block_shards=1)
    assert (result.computed, result.reused) == (1, 1) and len(result.records) == 16


def test_bad_input_raises_input_error(tmp_path):
    with pytest.raises(InputError, match="candidate"):
        evaluate_system(make_questions(2), FakeBackend(Script()), FakeRetriever(),
                        workflow_cfg(n_candidates=5), 4, 2, tmp_path, 0, system="x", workflow="hierarchy")
    with pytest.raises(InputError, match="golden_answers"):
        bad = [{"question_id": "q", "question": "?", "golden_answers": "paris", "dataset": "nq"}]
        evaluate_system(bad, FakeBackend(Script()), FakeRetriever(), CFG, 4, 2, tmp_path, 0,
                        system="x", workflow="cascade")
    with pytest.raises(InputError, match="trajectory_id"):
        run_of("q1-t0")


# ---------------------------------------------------------------- the stage


def test_evaluate_stage_writes_records_and_one_mlflow_run(tmp_path, monkeypatch, repo_root):
    import mlflow

    from pipeline.config import load_params
    from pipeline.stages import STAGES
    from pipeline.stages import evaluate as eval_stages

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    params = load_params(repo_root / "params.yaml", profile="ci")
    root = tmp_path / "repo"
    questions = pd.DataFrame(make_questions(5)).rename(columns={"question_id": "id"})
    (root / "data" / "splits").mkdir(parents=True)
    questions.to_parquet(root / "data" / "splits" / "test.parquet")
    model = root / "data" / "models" / "base"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    (model / "model.safetensors").write_bytes(b"weights")
    monkeypatch.setattr(eval_stages, "open_eval_backend", lambda path, engine: FakeBackend(Script()))
    monkeypatch.setattr(eval_stages, "open_retriever", lambda root: FakeRetriever())

    summary = STAGES["evaluate"](params, root, "c_mas_base")
    records = pd.read_parquet(root / "data" / "eval" / "c_mas_base" / "records.parquet")
    assert summary["records"] == len(records) == 5 * params.common.eval.runs
    assert (records["workflow"] == "cascade").all()
    runs = mlflow.search_runs(experiment_names=["multiagent-opd-ci"], output_format="list")
    assert [r.info.run_name for r in runs] == ["evaluate@c_mas_base"]
    assert runs[0].data.tags["system"] == "c_mas_base"
    assert {"macro_avg_at_4", "nq_pass_at_4", "format_failure_rate", "searches_per_workflow",
            "seconds"} <= set(runs[0].data.metrics)

    (model / "model.safetensors").write_bytes(b"retrained")  # new weights: old shards are discarded
    assert STAGES["evaluate"](params, root, "c_mas_base")["shards_computed"] == 1
    with pytest.raises(InputError, match="system: expected one of .*got 'nope'"):
        STAGES["evaluate"](params, root, "nope")
