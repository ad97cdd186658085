"""The RL trainer end to end on a random tiny Qwen3: loss finite, weights move, metrics logged,
Teacher scoring on the student's exact context, audit tables re-derive every advantage,
no_searcher_supervision keeps Searcher tokens out of the loss, and the training stages' wiring.

Rollouts use `ScriptedHFBackend`: a real HFBackend (the model that is trained) whose `generate`
writes scripted, well-formed team actions and records their true log-probs under the model
(`score`), so every role acts, every step is deterministic and old_logp is the student's own.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from pipeline.agents.prompts import load_prompts
from pipeline.agents.searcher import observation_text
from pipeline.basemodel.tiny_model import build_tiny_qwen3
from pipeline.basemodel.tokenizer import train_bpe_tokenizer
from pipeline.policy.base import Generation, SamplingParams
from pipeline.policy.hf_backend import HFBackend, save_hf_folder
from pipeline.policy.sampling_seeds import sample_seeds
from pipeline.retrieval.base import Passage
from pipeline.rl.advantages import compute_advantages
from pipeline.rl.teacher_scoring import score_with_teacher
from pipeline.rl.train_params import TrainConfig
from pipeline.rl.trainer import TrainInputs, train
from tests.helpers.configs import OPD_BETA, OPTIM, REWARDS, TIE_ON, workflow_cfg
from tests.helpers.fakes import DEFAULT_PASSAGES, FakeRetriever, TeamScript

# --------------------------------------------------------------------------- shared helpers


def tiny_tokenizer():
    prompts = load_prompts()
    texts = [prompts.leader, prompts.searcher, prompts.answerer, prompts.judge]
    texts += [p.text + " " + p.title for p in DEFAULT_PASSAGES]
    texts += [f"what is the capital of place {i}? part {i} paris rome berlin" for i in range(20)]
    return train_bpe_tokenizer(texts * 5, vocab_size=500)


def tiny_model(tokenizer, seed: int = 0, hidden: int = 48, layers: int = 2):
    return build_tiny_qwen3(
        tokenizer, hidden_size=hidden, num_layers=layers, num_heads=4, num_kv_heads=2,
        intermediate_size=2 * hidden, max_position_embeddings=2048, seed=seed,
    )


class VariedScript(TeamScript):
    """TeamScript whose answers vary with (tick seed, context, candidate) so GRPO groups differ."""

    def answer_for(self, context: str, salt: str) -> str:
        digest = hashlib.sha256(f"{salt}|{context}".encode()).digest()
        return ("paris", "rome", "berlin")[digest[0] % 3]


class ScriptedHFBackend(HFBackend):
    """HFBackend whose generations are scripted text, with the model's true log-probs."""

    def __init__(self, model, tokenizer, script: Callable[[str], str] | None = None):
        super().__init__(model, tokenizer)
        self.script = script or VariedScript(n_searches=1, n_waves=1, tasks_per_wave=2)

    def _text(self, context: str, params: SamplingParams, seed: int | None) -> str:
        text = self.script(context)
        if isinstance(self.script, VariedScript) and "\nAnswerer:" in context:
            text = f"<answer>{self.script.answer_for(context, str(seed))}</answer>"
        ends = [text.find(s) + len(s) for s in params.stop if s in text]
        return text[: min(ends)] if ends else text

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams, n: int = 1) -> list[list[Generation]]:
        out = []
        seeds = sample_seeds(params, len(prompts), n) or [None] * (len(prompts) * n)
        for i, prompt in enumerate(prompts):
            context = self.decode(prompt)
            ids = [self.encode(self._text(context, params, seeds[i * n + k]))[: params.max_new_tokens]
                   for k in range(n)]
            logps = self.score([prompt] * n, ids)
            out.append([Generation(t, lp, self.decode(t), "stop") for t, lp in zip(ids, logps)])
        return out


def questions(n: int, prefix: str = "q") -> pd.DataFrame:
    return pd.DataFrame({
        "id": [f"{prefix}{i}" for i in range(n)],
        "question": [f"what is the capital of place {i}?" for i in range(n)],
        "golden_answers": [["paris"] for _ in range(n)],
        "dataset": ["nq"] * n,
    })


def tiny_config(mode: str, steps: int = 2, **overrides) -> TrainConfig:
    rollout = workflow_cfg(top_k=2, n_candidates=3, max_searcher_turns=3, leader_max_new_tokens=64,
                           searcher_max_new_tokens=48, answerer_max_new_tokens=16)
    values = dict(
        system=mode, steps=steps, seed=7, questions_per_batch=2, oversample=1, searcher_outcome="team",
        trajectories_per_question=2, lr=1e-3,
        entropy_coef=0.01, eval_every=2, dev_questions=2, checkpoint_every=1, audit_every=1,
        judge_max_new_tokens=8, rollout=rollout, dev_rollout=replace(rollout, n_candidates=1),
        optim=OPTIM.model_copy(update={"n_minibatches": 3}), rewards=REWARDS, reference_seed=11,
        opd_beta=OPD_BETA, tie_on=TIE_ON,
    )
    values.update(overrides)
    return TrainConfig(**values)


def make_inputs(tokenizer, mode: str, tmp: Path, model=None, teacher_seed: int | None = 1) -> TrainInputs:
    policy = ScriptedHFBackend(model if model is not None else tiny_model(tokenizer, 0), tokenizer)
    teacher = None
    if mode != "c_mas_rl" and teacher_seed is not None:
        teacher = HFBackend(tiny_model(tokenizer, teacher_seed), tokenizer)
    judge = None
    if mode == "prompted_critic":
        judge = ScriptedHFBackend(tiny_model(tokenizer, 2), tokenizer,
                                  script=lambda ctx: "<score>7</score>" if "place 1" in ctx else "no idea")
    return TrainInputs(
        policy=policy, retriever=FakeRetriever(), train_questions=questions(5), dev_questions=questions(2, "d"),
        teacher=teacher, judge=judge, checkpoint_dir=tmp / "ckpt", audit_dir=tmp / "audit",
    )


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(autouse=True)
def _one_thread(torch_one_thread):
    """Tiny models train faster on one thread than on two busy-waiting ones."""


# --------------------------------------------------------------------------- tests


@pytest.mark.parametrize("mode", ["c_mas_rl", "multiagent_opd", "prompted_critic"])
def test_training_run_moves_weights_and_logs(tokenizer, tmp_path, mode):
    inputs = make_inputs(tokenizer, mode, tmp_path)
    before = {k: v.detach().clone() for k, v in inputs.policy.model.state_dict().items()}
    logged: list[tuple[int, dict]] = []
    result = train(tiny_config(mode), inputs, log_fn=lambda s, m: logged.append((s, m)))
    train_rows = [m for _, m in logged if "pg_loss" in m]
    assert len(train_rows) == 2 and all(np.isfinite(m["pg_loss"]) for m in train_rows)
    keys = set().union(*(m.keys() for m in train_rows))
    expected = {"reward_answerer", "entropy", "clip_fraction", "tokens_per_second", "pg_loss"}
    expected |= {"reward_searcher"} if mode != "multiagent_opd" else {"kl_to_teacher"}
    expected |= {"reward_leader"} if mode != "c_mas_rl" else set()
    assert expected <= keys
    dev_steps = [s for s, m in logged if "dev_em" in m]
    assert dev_steps == [0, 2]
    for _, m in logged:
        if "dev_em" in m:
            assert {"dev_no_search_share", "format_failure_rate", "searches_per_workflow"} <= m.keys()
    after = inputs.policy.model.state_dict()
    assert any(not torch.equal(before[k], after[k]) for k in before)
    assert result.resumed_from == 0 and (tmp_path / "ckpt" / "step-0002").is_dir()
    if mode == "prompted_critic":
        samples = pd.read_parquet(tmp_path / "audit" / "step-0000" / "samples.parquet")
        judged = samples[(samples["role"] == "searcher") & ~samples["malformed"]]
        assert set(judged["judge_score"]) <= {0.0, 7.0} and len(judged)
        assert all(m["judge_unparsable"] > 0 for m in train_rows)


def test_teacher_scores_exactly_the_students_context(tokenizer):
    teacher = HFBackend(tiny_model(tokenizer, 3), tokenizer)
    prompt = teacher.encode_prompt("You are a Searcher.\nTask: capital of place 1\nSearcher:")
    gen1 = teacher.encode("<search>capital</search>")
    obs = teacher.encode(observation_text([Passage("p0", "Paris", "Paris is the capital.")]))
    gen2 = teacher.encode("<report>paris</report>")
    response = gen1 + obs + gen2
    sources = ["generated"] * len(gen1) + ["observation"] * len(obs) + ["generated"] * len(gen2)
    samples = pd.DataFrame({"sample_id": ["s0"], "prompt_ids": [prompt]})
    tokens = pd.DataFrame({
        "sample_id": "s0", "pos": np.arange(len(response)), "token_id": response, "source": sources,
        "loss_mask": [int(s == "generated") for s in sources], "teacher_logp": np.nan,
    }).sample(frac=1.0, random_state=0)  # row order must not matter
    scored = score_with_teacher(samples, tokens, teacher).sort_values("pos")
    reference = np.asarray(teacher.score([prompt], [response])[0])
    generated = (scored["source"] == "generated").to_numpy()
    np.testing.assert_array_equal(scored["teacher_logp"].to_numpy()[generated], reference[generated])
    assert scored["teacher_logp"][~generated].isna().all()
    # a different context gives different scores: the check above can fail
    other = np.asarray(teacher.score([prompt[:-3]], [response])[0])
    assert not np.allclose(other[generated], reference[generated])


def test_audit_tables_rederive_every_advantage(tokenizer, tmp_path):
    inputs = make_inputs(tokenizer, "multiagent_opd", tmp_path)
    train(tiny_config("multiagent_opd", steps=1), inputs)
    step = tmp_path / "audit" / "step-0000"
    samples = pd.read_parquet(step / "samples.parquet")
    tokens = pd.read_parquet(step / "tokens.parquet")
    assert {"reward", "r_em", "c_tool", "b_s", "judge_score", "malformed", "kl_to_teacher"} <= set(samples.columns)
    assert set(samples["role"]) == {"leader", "searcher", "answerer"}
    rederived = compute_advantages(samples, tokens.assign(advantage=0.0), "multiagent_opd", beta=0.01)
    np.testing.assert_array_equal(rederived["advantage"].to_numpy(), tokens["advantage"].to_numpy())
    assert (tokens["advantage"] != 0).any()
    # the samples' reward is what entered the advantage: perturbing it changes the result
    bumped = samples.copy()
    bumped.loc[bumped["role"] == "answerer", "reward"] += np.arange((bumped["role"] == "answerer").sum())
    changed = compute_advantages(bumped, tokens.assign(advantage=0.0), "multiagent_opd", beta=0.01)
    assert not np.array_equal(changed["advantage"].to_numpy(), tokens["advantage"].to_numpy())
    assert (tmp_path / "audit" / "data_docs" / "step-0000" / "index.html").is_file()


def test_no_searcher_supervision_leaves_searcher_tokens_out_of_the_loss(tokenizer, tmp_path):
    inputs = make_inputs(tokenizer, "ablation_no_searcher_supervision", tmp_path)
    train(tiny_config("ablation_no_searcher_supervision", steps=1), inputs)
    tokens = pd.read_parquet(tmp_path / "audit" / "step-0000" / "tokens.parquet")
    searcher = tokens["role"] == "searcher"
    assert searcher.any() and (tokens.loc[searcher & (tokens["source"] == "generated")].shape[0] > 0)
    assert (tokens.loc[searcher, "loss_mask"] == 0).all() and (tokens.loc[searcher, "advantage"] == 0).all()
    assert tokens.loc[searcher, "teacher_logp"].isna().all()  # never scored: not needed
    others = tokens[~searcher & (tokens["source"] == "generated")]
    assert (others["loss_mask"] == 1).all() and others["teacher_logp"].notna().all()


def test_stage_wiring_trains_and_saves_the_system(tokenizer, tmp_path, monkeypatch):
    """train@multiagent_opd: reads splits, base and Teacher folders, logs one MLflow run, saves
    data/models/multiagent_opd."""
    import mlflow

    from pipeline.config import load_params
    from pipeline.stages import STAGES, stage2_start
    from pipeline.stages import train as train_stage

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setattr(train_stage, "open_retriever", lambda root: FakeRetriever())
    def scripted(path, engine=None):
        loaded = HFBackend(path)
        return ScriptedHFBackend(loaded.model, loaded.tokenizer)

    monkeypatch.setattr(train_stage, "open_policy", scripted)
    monkeypatch.setattr(stage2_start, "open_retriever", lambda root: FakeRetriever())
    monkeypatch.setattr(stage2_start, "open_policy", scripted)
    save_hf_folder(tiny_model(tokenizer, 0), tokenizer, tmp_path / "data" / "models" / "base")
    save_hf_folder(tiny_model(tokenizer, 1), tokenizer, tmp_path / "data" / "models" / "c_mas_rl")
    (tmp_path / "data" / "splits").mkdir(parents=True)
    questions(6).to_parquet(tmp_path / "data" / "splits" / "train.parquet")
    questions(3, "d").to_parquet(tmp_path / "data" / "splits" / "dev.parquet")
    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml", "ci")
    STAGES["stage2_start"](params, tmp_path)
    # the stored step-0 metrics are what the training run logs at step 0 (the same numbers a
    # recomputation gives, so one is marked to tell reading from recomputing)
    stored_path = tmp_path / "data" / "stage2_start" / "metrics.json"
    stored = json.loads(stored_path.read_text())
    stored["metrics"]["dev_em"] = 0.123
    stored_path.write_text(json.dumps(stored))
    summary = STAGES["train"](params, tmp_path, "multiagent_opd")
    out = tmp_path / "data" / "models" / "multiagent_opd"
    assert (out / "config.json").is_file() and summary["steps"] == params.train.systems.multiagent_opd.steps
    trained = HFBackend(out).model.state_dict()
    base = HFBackend(tmp_path / "data" / "models" / "base").model.state_dict()
    assert any(not torch.equal(trained[k], base[k]) for k in base)
    runs = mlflow.search_runs(experiment_names=["multiagent-opd-ci"], filter_string="tags.stage != 'stage2_start'")
    assert (list(runs["tags.mlflow.runName"]) == ["train@multiagent_opd"]
            and list(runs["tags.system"]) == ["multiagent_opd"])
    assert "metrics.pg_loss" in runs.columns and "metrics.dev_em" in runs.columns
    assert (tmp_path / "data" / "audit" / "multiagent_opd" / "step-0000" / "tokens.parquet").is_file()
    step0 = mlflow.MlflowClient().get_metric_history(runs["run_id"][0], "dev_em")
    assert [m.value for m in step0 if m.step == 0] == [0.123]  # step 0 comes from stage2_start


def test_train_stage_rejects_an_untrained_or_unknown_system(tmp_path):
    from pipeline.config import load_params
    from pipeline.errors import InputError
    from pipeline.stages import STAGES

    params = load_params(Path(__file__).resolve().parents[1] / "params.yaml", "ci")
    for name in ("ablation_no_leader", "h_mas_base"):
        with pytest.raises(InputError, match=f"expected a trained system, .*got '{name}'"):
            STAGES["train"](params, tmp_path, name)


def test_micro_batches_give_the_minibatch_gradient(tokenizer, tmp_path, monkeypatch):
    """Splitting each minibatch by length (gradient accumulation) changes only the padding:
    the weights after one update match a single pass over each minibatch; the test can fail
    because a wrong share weighting (e.g. a plain mean over micro-batches) moves them."""
    import copy

    from pipeline.rl import trainer
    inputs = make_inputs(tokenizer, "multiagent_opd", tmp_path)
    cfg = tiny_config("multiagent_opd")
    batch = trainer.collect_batch(cfg, inputs, 0)
    start = copy.deepcopy(inputs.policy.model.state_dict())

    def update(budget: int):
        inputs.policy.model.load_state_dict(start)
        monkeypatch.setattr(trainer, "MICRO_BATCH_TOKENS", budget)
        model = inputs.policy.model
        stats = trainer.ppo_update(model, torch.optim.SGD(model.parameters(), lr=1.0), inputs.policy, batch, cfg, 0)
        return {k: v.clone() for k, v in model.state_dict().items()}, stats

    assert batch.samples["sample_id"].nunique() > 3
    whole, whole_stats = update(10**9)
    split, split_stats = update(1)  # every sample its own micro-batch
    for key in whole:
        torch.testing.assert_close(split[key], whole[key], rtol=1e-4, atol=1e-6)
    assert split_stats["pg_loss"] == pytest.approx(whole_stats["pg_loss"], rel=1e-4, abs=1e-7)

    orig = trainer.policy_loss  # a loss scaled differently per micro-batch must not give the same weights
    monkeypatch.setattr(trainer, "policy_loss",
                        lambda new, *a, **k: (lambda loss, m: (loss * new.shape[1], m))(*orig(new, *a, **k)))
    broken, _ = update(1)
    assert any(not torch.allclose(broken[k], whole[k], rtol=1e-4, atol=1e-6) for k in whole)


def test_length_buckets_respect_the_budget_and_cover_every_sample():
    from pipeline.rl.loss import length_buckets

    prompts, responses = [100, 20, 300, 40, 90, 10], [10, 5, 30, 5, 10, 2]
    buckets = length_buckets(prompts, responses, 400)
    assert sorted(i for b in buckets for i in b) == list(range(6))
    for b in buckets:
        if len(b) > 1:
            assert len(b) * (max(prompts[i] for i in b) + max(responses[i] for i in b)) <= 400
    assert buckets[0] == [2]  # 330 tokens: alone
    assert length_buckets(prompts, responses, 10**6) == [[2, 0, 4, 3, 1, 5]]


def test_dev_sample_mixes_the_datasets_and_is_fixed():
    from pipeline.data.dev_sample import dev_sample

    dev = pd.DataFrame({"dataset": ["hotpotqa"] * 128 + ["nq"] * 128, "id": [f"d{i}" for i in range(256)]})
    picked = dev_sample(dev, 64, seed=5)
    assert len(picked) == 64 and picked["id"].is_unique
    assert set(picked["dataset"]) == {"hotpotqa", "nq"}  # the first 64 rows would be hotpotqa only
    assert picked["id"].tolist() == dev_sample(dev, 64, seed=5)["id"].tolist()
    assert dev_sample(dev, 300, seed=5) is dev


def test_dev_evaluation_samples_with_one_seed_for_every_system(monkeypatch):
    """Systems that start from the same weights must start from the same dev EM: the dev rollout's
    sampling seed is the shared reference seed, not the system's training seed."""
    import pipeline.rl.trainer as trainer

    seeds: list[int] = []
    monkeypatch.setattr(trainer, "run_workflow", lambda *args, seed, **kw: seeds.append(seed) or "rollout")
    monkeypatch.setattr(trainer, "score_rollout", lambda rollout: pd.DataFrame(
        {"strict_correct": [1.0, 0.0], "search_actions": [1, 0], "format_failure": [0.0, 0.0],
         "searcher_calls": [1, 1], "searcher_calls_read": [1, 0], "searcher_calls_kept": [1, 0]}))
    inputs = TrainInputs(policy=None, retriever=None, train_questions=questions(2), dev_questions=questions(2, "d"))
    for system_seed in (7, 108, 613):
        out = trainer.dev_evaluate(tiny_config("multiagent_opd", seed=system_seed).dev, "hierarchy", inputs)
        assert out["dev_em"] == 0.5 and out["dev_no_search_share"] == 0.5
        assert out["dev_searcher_fidelity"] == 1.0 and out["dev_searches_per_searcher_call"] == 0.5
    assert seeds == [11, 11, 11]


def test_dynamic_sampling_trains_only_on_questions_with_differing_outcomes(tokenizer, tmp_path, monkeypatch):
    """With oversample 2 the step rolls out twice the questions and keeps those whose trajectories'
    team outcome differs. The outcomes are set after the rewards: all wrong (the filter falls back
    to the first two drawn), then one right trajectory in the last drawn question."""
    from pipeline.rl import batch_rewards, trainer
    inputs = make_inputs(tokenizer, "c_mas_rl", tmp_path)
    plain = trainer.collect_batch(tiny_config("c_mas_rl"), inputs, 0)
    assert plain.informative_questions is None and plain.samples["question_id"].nunique() == 2

    rewards = batch_rewards.compute_rewards
    drawn: list[list[str]] = []

    def outcomes(right_in_last: bool):
        def patched(samples, *args, **kwargs):
            out = rewards(samples, *args, **kwargs).assign(r_em=0.0)
            drawn.append(list(dict.fromkeys(out["question_id"])))
            if right_in_last:
                first = out.loc[out["question_id"] == drawn[-1][-1], "trajectory_id"].iloc[0]
                out.loc[out["trajectory_id"] == first, "r_em"] = 1.0
            return out
        return patched

    cfg = tiny_config("c_mas_rl", oversample=2)
    monkeypatch.setattr(batch_rewards, "compute_rewards", outcomes(right_in_last=False))
    tied = trainer.collect_batch(cfg, inputs, 0)
    assert tied.drawn_questions == 4 and len(drawn[-1]) == 4 and tied.informative_questions == 0
    assert list(dict.fromkeys(tied.samples["question_id"])) == drawn[-1][:2]

    monkeypatch.setattr(batch_rewards, "compute_rewards", outcomes(right_in_last=True))
    batch = trainer.collect_batch(cfg, inputs, 0)
    assert batch.informative_questions == 1 and set(batch.samples["question_id"]) == {drawn[-1][-1]}
    assert len(batch.tokens) and set(batch.tokens["sample_id"]) <= set(batch.samples["sample_id"])
    assert batch.tokens["advantage"].abs().sum() > 0  # advantages come from the kept groups
    metrics = trainer.batch_metrics(batch, trainer.trained_system("c_mas_rl"))
    assert metrics["trained_questions"] == 1 and metrics["informative_share"] == 0.25
