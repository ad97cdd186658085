"""The verl agent loop (`multiagent_opd_team`) against the in-process trainer's path.

The agent loop is built the way verl's AgentLoopWorker builds it (its registry entry through
hydra.utils.instantiate) and driven by `SGLangServerManager`: verl's server client plus verl's
SGLang server adapter in miniature, talking HTTP to the fake SGLang server of
tests/helpers/fake_sglang.py, which answers with an in-process HFBackend. The Teacher is a second
fake SGLang server. The reference is the in-process path of `collect_batch` on the same
trajectories: `run_workflow` (one trajectory per call, its seed from `trajectory_seed`) over
`PerEntrySeedBackend` (each entry sampled alone with its entry seed, which is what the agent
loop asks of the rollout servers), then to_tables, score_with_teacher, compute_rewards and
compute_advantages over the whole batch.

Two policies: the scripted HFBackend of test_rl_trainer (every role acts, Searchers search:
observations, waves, parallel Searchers; true log-probs) and a random tiny Qwen3 that samples
for real (the seeds must match for the tables to match).
"""

from __future__ import annotations

import asyncio
import math
from types import SimpleNamespace

import httpx
import hydra
import numpy as np
import pandas as pd
import pytest
import torch
from omegaconf import OmegaConf
from verl.experimental.agent_loop.agent_loop import AgentLoopWorker, DictConfigWrap, _agent_loop_registry
from verl.trainer.ppo.core_algos import get_adv_estimator_fn
from verl.trainer.ppo.padding_utils import construct_minimal_padding_template
from verl.utils.tensordict_utils import list_of_dict_to_tensordict
from verl.workers.rollout.replica import TokenOutput

from pipeline.agents import to_tables
from pipeline.agents.prompts import load_prompts
from pipeline.agents.trajectory import Rollout
from pipeline.agents.workflows import run_workflow
from pipeline.errors import InputError
from pipeline.policy.base import SamplingParams
from pipeline.policy.hf_backend import HFBackend
from pipeline.policy.sampling_seeds import entry_seed
from pipeline.policy.sglang_backend import SGLangBackend
from pipeline.rl.advantages import compute_advantages
from pipeline.rl.rewards import compute_rewards
from pipeline.rl.teacher_scoring import score_with_teacher
from pipeline.rl.train_params import TrainConfig
from pipeline.systems import BY_NAME as MODES
from pipeline.verl_agent.advantage import batch_advantages, fields_advantages
from pipeline.verl_agent.agent_run import renumber
from pipeline.verl_agent.loop import AGENT_NAME
from pipeline.verl_agent.outputs import SAMPLE_KEY, SOURCE_KEY, TEACHER_KEY, Row, fit_lengths, tables_from_outputs
from pipeline.verl_agent.seeds import PerEntrySeedBackend, trajectory_seed
from pipeline.verl_agent.server import ServerError, ServerManagerBackend
from tests.helpers.configs import OPD_BETA, OPTIM, REWARDS, TIE_ON, workflow_cfg
from tests.helpers.fake_sglang import serve_backend
from tests.helpers.fakes import FakeRetriever
from tests.test_rl_trainer import ScriptedHFBackend, tiny_model, tiny_tokenizer

STEP = 3
PROMPT_LENGTH = RESPONSE_LENGTH = 1024
FLOATS = ["old_logp", "teacher_logp"]  # NaN-aware exact comparison


def settings(system: str, sampled: bool = False, **rollout) -> TrainConfig:
    limits = dict(leader_max_new_tokens=12, searcher_max_new_tokens=10, answerer_max_new_tokens=6) if sampled else \
        dict(leader_max_new_tokens=64, searcher_max_new_tokens=48, answerer_max_new_tokens=16)
    cfg = workflow_cfg(**{**dict(top_k=2, n_candidates=3, max_searcher_turns=3), **limits, **rollout})
    return TrainConfig(system=system, steps=1, seed=11, questions_per_batch=1, oversample=1, searcher_outcome="team",
                       trajectories_per_question=1, lr=1e-4, entropy_coef=0.0, eval_every=1, dev_questions=1,
                       checkpoint_every=1, audit_every=1, judge_max_new_tokens=8, rollout=cfg,
                       dev_rollout=workflow_cfg(**{**cfg.__dict__, "n_candidates": 1}),
                       optim=OPTIM, rewards=REWARDS, reference_seed=0,
                       opd_beta=OPD_BETA, tie_on=TIE_ON)


QUESTIONS = [
    {"question_id": f"q{i}", "question": f"what is the capital of place {i}?", "golden_answers": ["paris"],
     "dataset": "nq"}
    for i in range(2)
]


class SGLangServerManager:
    """verl's LLMServerClient.generate + AsyncSGLangServer.generate, over SGLang's HTTP API."""

    def __init__(self, url: str, global_steps: int = STEP) -> None:
        self.url = url
        self.global_steps = global_steps
        self.calls: list[dict] = []
        self._client: httpx.AsyncClient | None = None

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs) -> TokenOutput:
        self.calls.append({"request_id": request_id, "sampling_params": dict(sampling_params)})
        sampling = dict(sampling_params)
        return_logprob = sampling.pop("logprobs", False)  # verl's flag, as its SGLang server pops it
        self._client = self._client or httpx.AsyncClient(timeout=60)
        response = await self._client.post(f"{self.url}/generate", json={
            "input_ids": list(prompt_ids), "sampling_params": sampling, "return_logprob": return_logprob})
        assert response.status_code == 200, response.text
        out = response.json()
        meta = out["meta_info"]
        return TokenOutput(token_ids=out["output_ids"], log_probs=[t[0] for t in meta["output_token_logprobs"]],
                           stop_reason=meta["finish_reason"]["type"], extra_fields={"global_steps": self.global_steps})

    async def close(self) -> None:
        if self._client is not None:
            await self._client.aclose()


def make_loop(manager, tokenizer, team: TrainConfig, teacher_url: str | None, repo_root):
    """The agent loop as verl's AgentLoopWorker instantiates it, on a fake retriever."""
    cfg = OmegaConf.create({"actor_rollout_ref": {"rollout": {"prompt_length": PROMPT_LENGTH,
                                                              "response_length": RESPONSE_LENGTH}}, "data": {}})
    loop = hydra.utils.instantiate(
        config=_agent_loop_registry[AGENT_NAME], trainer_config=DictConfigWrap(cfg), server_manager=manager,
        tokenizer=tokenizer, processor=None, hf_model_type=None, dataset_cls=None,
        data_config=DictConfigWrap(cfg.data), tools=None,
        params=str(repo_root / "params.yaml"), profile="ci", system="multiagent_opd", teacher_url=teacher_url,
        retriever_url="http://unused", send_seed=True,
    )
    assert loop.cfg.system == "multiagent_opd" and loop.cfg.rollout.n_candidates == 5  # read from params.yaml (ci)
    loop.cfg, loop.system = team, MODES[team.system]
    loop.open_retriever = FakeRetriever
    return loop


def extra_info(question: dict, split: str = "train") -> dict:
    return {**question, "split": split}


async def run_loop(loop, manager, n_traj: int, split: str = "train") -> list:
    outputs = []
    try:
        for question in QUESTIONS:
            for k in range(n_traj):
                out = await loop.run({"temperature": 1.0},
                                     raw_prompt=[{"role": "user", "content": question["question"]}],
                                     extra_info=extra_info(question, split), session_id=k, global_steps=STEP)
                outputs.append(out)
    finally:
        await manager.close()
    return outputs


def reference_batch(policy, teacher, team: TrainConfig, n_traj: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """collect_batch's path on the same trajectories: rewards and advantages over the batch."""
    trajectories = []
    for question in QUESTIONS:
        for k in range(n_traj):
            rollout = run_workflow(MODES[team.system].workflow, [question], PerEntrySeedBackend(policy),
                                   FakeRetriever(), team.rollout, n_traj=1,
                                   seed=trajectory_seed(team.seed, STEP, question["question_id"], k))
            renumber(rollout, k)
            trajectories += rollout.trajectories
    batch = Rollout(MODES[team.system].workflow, team.rollout, 0, load_prompts().version, trajectories)
    samples, tokens = to_tables(batch, MODES[team.system].trained_roles)
    if MODES[team.system].training.teacher:
        tokens = score_with_teacher(samples, tokens, teacher)
    samples = compute_rewards(samples, tokens, team.system, team.rewards)
    return samples, compute_advantages(samples, tokens, team.system, team.opd_beta)


def assert_tables_equal(got, want) -> None:
    samples, tokens = got
    ref_samples, ref_tokens = want
    assert list(samples["sample_id"]) == list(ref_samples["sample_id"])
    pd.testing.assert_frame_equal(samples.reset_index(drop=True), ref_samples.reset_index(drop=True), check_dtype=False)
    ref_tokens = ref_tokens.drop(columns="advantage")
    tokens = tokens.drop(columns="advantage")
    exact = [c for c in ref_tokens.columns if c not in FLOATS]
    pd.testing.assert_frame_equal(tokens[exact].reset_index(drop=True), ref_tokens[exact].reset_index(drop=True))
    for c in FLOATS:
        np.testing.assert_array_equal(tokens[c].to_numpy(), ref_tokens[c].to_numpy())


@pytest.fixture(scope="module")
def tokenizer():
    return tiny_tokenizer()


@pytest.fixture(autouse=True)
def _one_thread(torch_one_thread):
    """Tiny models train faster on one thread than on two busy-waiting ones."""


def policy_backend(kind: str, tokenizer) -> HFBackend:
    model = tiny_model(tokenizer, 0)
    return ScriptedHFBackend(model, tokenizer) if kind == "scripted" else HFBackend(model, tokenizer)


def run_both(tokenizer, repo_root, mode: str, kind: str, n_traj: int = 2, split: str = "train"):
    """(agent-loop outputs, manager calls, reference tables) for `QUESTIONS` x n_traj."""
    team = settings(mode, sampled=kind == "sampled")
    policy = policy_backend(kind, tokenizer)
    teacher = HFBackend(tiny_model(tokenizer, 1), tokenizer)
    with serve_backend(policy) as policy_url, serve_backend(teacher) as teacher_url:
        manager = SGLangServerManager(policy_url)
        loop = make_loop(manager, tokenizer, team, teacher_url, repo_root)
        outputs = asyncio.run(run_loop(loop, manager, n_traj, split))
        # the in-process trainer scoring with the same Teacher server (SGLang, as in the paper profile)
        teacher_server = SGLangBackend(teacher_url, tokenizer=tokenizer)
        reference = None if split != "train" else reference_batch(policy, teacher_server, team, n_traj)
    return outputs, manager.calls, reference


# --------------------------------------------------------------------------- the agent loop


@pytest.mark.parametrize(("mode", "kind"),
                         [("c_mas_rl", "scripted"), ("multiagent_opd", "scripted"), ("multiagent_opd", "sampled")])
def test_agent_loop_reproduces_the_in_process_tables(tokenizer, repo_root, mode, kind):
    outputs, calls, reference = run_both(tokenizer, repo_root, mode, kind)
    assert all(isinstance(o, list) and len(o) > 1 for o in outputs)  # several samples per run
    flat = [o for run in outputs for o in run]
    assert_tables_equal(tables_from_outputs(flat), reference)
    samples = reference[0]
    assert set(samples["workflow"]) == {MODES[mode].workflow}
    assert set(samples["trajectory_id"]) == {f"q{i}/t{k}" for i in range(2) for k in range(2)}
    if kind == "scripted":
        assert set(samples["role"]) == ({"searcher", "answerer"} if mode == "c_mas_rl"
                                        else {"leader", "searcher", "answerer"})
        assert (samples["n_search"] > 0).any()
    # every request went to the server alone, with its entry seed, SGLang's sampling keys and the stop tags kept
    assert len(calls) == sum(samples["n_turns"])
    assert all(c["sampling_params"]["no_stop_trim"] and c["sampling_params"]["logprobs"] for c in calls)
    assert len({c["sampling_params"]["sampling_seed"] for c in calls}) > len(samples) // 2
    assert {c["request_id"] for c in calls} == set(samples["trajectory_id"])
    for run in outputs:
        assert {o.extra_fields["min_global_steps"] for o in run} == {STEP}


def test_outputs_carry_the_contract_masks(tokenizer, repo_root):
    outputs, _, (samples, tokens) = run_both(tokenizer, repo_root, "multiagent_opd", "scripted", n_traj=1)
    flat = [o for run in outputs for o in run]
    assert [o.extra_fields[SAMPLE_KEY]["sample_id"] for o in flat] == list(samples["sample_id"])
    observed = 0
    for out in flat:
        source = np.array(out.extra_fields[SOURCE_KEY])
        mask = np.array(out.response_mask)
        logp = np.array(out.response_logprobs)
        assert len(source) == len(mask) == len(logp) == len(out.response_ids)
        assert (mask == (source == "generated")).all()  # every role is trained in opd
        assert (logp[source == "observation"] == 0.0).all() and (logp[source == "generated"] < 0).all()
        observed += int((source == "observation").sum())
        role = out.extra_fields[SAMPLE_KEY]["role"]
        assert role == "searcher" or (source == "generated").all()
        reward = samples.set_index("sample_id").loc[out.extra_fields[SAMPLE_KEY]["sample_id"], "reward"]
        assert out.reward_score == (0.0 if math.isnan(reward) else pytest.approx(reward, abs=1e-6))
    assert observed > 0  # Searchers read passages, and those tokens are masked
    # verl's V1 worker copies the last row's reward_extra_info onto the others: it must be trajectory-level
    for run in outputs:
        assert len({o.extra_fields["reward_extra_info"]["r_em"] for o in run}) == 1


def test_dev_rows_use_one_candidate_and_the_team_outcome(tokenizer, repo_root):
    outputs, _, _ = run_both(tokenizer, repo_root, "multiagent_opd", "scripted", n_traj=1, split="dev")
    samples, tokens = tables_from_outputs([o for run in outputs for o in run])
    answerers = samples[samples["role"] == "answerer"]
    assert list(answerers["candidate_id"]) == [0, 0]  # one candidate per question
    assert (samples["reward"] == samples["r_em"]).all() and set(samples["r_em"]) <= {0.0, 1.0}
    assert tokens["teacher_logp"].isna().all()  # no Teacher on dev rows


def test_a_teacher_mode_without_a_teacher_url_fails(tokenizer, repo_root):
    team = settings("multiagent_opd")
    loop = make_loop(SGLangServerManager("http://unused"), tokenizer, team, None, repo_root)
    with pytest.raises(InputError, match="teacher_url"):
        asyncio.run(loop.run({}, raw_prompt=[], extra_info=extra_info(QUESTIONS[0]), session_id=0))


def test_rows_longer_than_verls_limits_are_cut_consistently(caplog):
    row = Row(list(range(10)), [5, 6, 7, 8], [1, 0, 0, 1], [-0.1, 0.0, 0.0, -0.4],
              {SAMPLE_KEY: {"sample_id": "s"}, SOURCE_KEY: ["generated", "observation", "observation", "generated"],
               TEACHER_KEY: [-0.2, float("nan"), float("nan"), -0.3]})
    cut = fit_lengths(row, prompt_length=6, response_length=2)
    assert cut.prompt_ids == [4, 5, 6, 7, 8, 9] and cut.response_ids == [5, 6] and cut.response_mask == [1, 0]
    assert cut.logprobs == [-0.1, 0.0] and cut.extra[SOURCE_KEY] == ["generated", "observation"]
    assert len(cut.extra[TEACHER_KEY]) == 2 and "cut to rollout.prompt_length=6" in caplog.text


# --------------------------------------------------------------------------- the estimator inside verl


def verl_batch(tokenizer, flat_outputs):
    """The padded verl batch verl's AgentLoopWorker makes of these outputs (its own code)."""
    worker = AgentLoopWorker.__new__(AgentLoopWorker)
    worker.tokenizer = tokenizer
    worker.rollout_config = SimpleNamespace(prompt_length=PROMPT_LENGTH, response_length=RESPONSE_LENGTH)
    worker.processor, worker.reward_loop_worker_handles = None, None
    worker.distillation_enabled, worker.mm_processor_kwargs = False, {}

    async def post():
        return [await worker._agent_loop_postprocess(o, validate=False, raw_prompt=[]) for o in flat_outputs]

    return worker._postprocess(asyncio.run(post()), input_non_tensor_batch=None)


@pytest.mark.parametrize(("mode", "kind"), [
    ("multiagent_opd", "scripted"), ("c_mas_rl", "scripted"), ("ablation_no_searcher_supervision", "scripted"),
    ("ablation_outcome_rl_searcher", "scripted"), ("multiagent_opd", "sampled"),
])
def test_registered_estimator_on_the_verl_batch_equals_in_process_advantages(tokenizer, repo_root, mode, kind):
    outputs, _, (samples, tokens) = run_both(tokenizer, repo_root, mode, kind)
    data = verl_batch(tokenizer, [o for run in outputs for o in run])
    assert get_adv_estimator_fn("multiagent_opd") is not None
    advantages = batch_advantages(data.batch, data.non_tensor_batch)
    assert advantages.shape == data.batch["responses"].shape
    row = {d["sample_id"]: i for i, d in enumerate(data.non_tensor_batch[SAMPLE_KEY])}
    got = advantages[[row[s] for s in tokens["sample_id"]],
                     torch.as_tensor(tokens["pos"].to_numpy().copy())].to(torch.float64).numpy()
    np.testing.assert_allclose(got, tokens["advantage"].to_numpy(), rtol=0, atol=1e-6)
    assert np.abs(tokens["advantage"].to_numpy()).max() > 0  # the comparison is not 0 == 0
    # nothing outside the responses, nothing on masked tokens
    mask = data.batch["response_mask"].bool()
    assert (advantages[~mask] == 0).all()
    if mode == "ablation_no_searcher_supervision":
        searchers = [row[s] for s in samples.loc[samples["role"] == "searcher", "sample_id"]]
        assert (advantages[searchers] == 0).all() and (data.batch["response_mask"][searchers] == 0).all()


def tq_fields(flat_outputs):
    """What verl's V1 AgentLoopWorkerTQ stores for these outputs (one entry per output, jagged),
    plus one filler row as verl's batch padding makes it (a copy of row 0, tagged is_padding)."""
    fields = []
    for out in flat_outputs:
        field = out.as_dict()
        field["loss_mask"] = field["response_mask"]
        field["input_ids"] = torch.cat([field["prompts"], field["responses"]])
        field["attention_mask"] = torch.ones_like(field["input_ids"])
        field["position_ids"] = torch.arange(len(field["input_ids"]))
        fields.append(field)
    filler, tag = construct_minimal_padding_template(fields[0], {}, eos_token_id=0)
    return list_of_dict_to_tensordict(fields + [filler]), [{} for _ in fields] + [tag]


@pytest.mark.parametrize("mode", ["multiagent_opd", "c_mas_rl"])
def test_v1_trainer_advantages_on_transfer_queue_fields_equal_in_process(tokenizer, repo_root, mode):
    outputs, _, (samples, tokens) = run_both(tokenizer, repo_root, mode, "scripted")
    flat = [o for run in outputs for o in run]
    fields, tags = tq_fields(flat)
    advantages = fields_advantages(fields, tags).unbind()
    assert len(advantages) == len(flat) + 1 and (advantages[-1] == 0).all()  # the filler row
    row = {o.extra_fields[SAMPLE_KEY]["sample_id"]: i for i, o in enumerate(flat)}
    got = [float(advantages[row[s]][p]) for s, p in zip(tokens["sample_id"], tokens["pos"])]
    np.testing.assert_allclose(got, tokens["advantage"].to_numpy(), rtol=0, atol=1e-6)
    assert [len(a) for a in advantages[:-1]] == [len(o.response_ids) for o in flat]


# --------------------------------------------------------------------------- the server adapter


class RecordingManager:
    def __init__(self, outputs) -> None:
        self.outputs = list(outputs)
        self.calls = []

    async def generate(self, request_id, *, prompt_ids, sampling_params, **kwargs):
        self.calls.append((request_id, list(prompt_ids), dict(sampling_params)))
        return self.outputs.pop(0)


def run_adapter(manager, tokenizer, prompts, params, n=1, send_seed=True):
    async def main():
        backend = ServerManagerBackend(manager, tokenizer, asyncio.get_running_loop(), "q/t0", send_seed=send_seed)
        return await asyncio.get_running_loop().run_in_executor(None, backend.generate, prompts, params, n)

    return asyncio.run(main())


def test_server_backend_sends_one_seeded_request_per_entry(tokenizer):
    out = TokenOutput(token_ids=[5, 6], log_probs=[-0.1, -0.2], stop_reason="stop")
    manager = RecordingManager([out] * 4)
    params = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=8, stop=("</a>",), seed=123)
    gens = run_adapter(manager, tokenizer, [[1, 2], [3]], params, n=2)
    assert [len(g) for g in gens] == [2, 2] and gens[1][0].token_ids == [5, 6] and gens[0][1].finish_reason == "stop"
    assert [c[1] for c in manager.calls] == [[1, 2], [1, 2], [3], [3]]
    assert [c[2]["sampling_seed"] for c in manager.calls] == [entry_seed(123, k) for k in range(4)]
    assert manager.calls[0][2] == {"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 8, "no_stop_trim": True,
                                   "logprobs": True, "stop": ["</a>"], "sampling_seed": 123}
    unseeded = RecordingManager([out])
    run_adapter(unseeded, tokenizer, [[1]], params, send_seed=False)
    assert "sampling_seed" not in unseeded.calls[0][2]


@pytest.mark.parametrize(("output", "match"), [
    (TokenOutput(token_ids=[5], log_probs=None, stop_reason="stop"), "log-prob"),
    (TokenOutput(token_ids=[5], log_probs=[-1.0], stop_reason="abort"), "aborted"),
    (TokenOutput(token_ids=[5], log_probs=[-1.0], stop_reason="weird"), "stop_reason"),
])
def test_server_backend_refuses_unusable_answers(tokenizer, output, match):
    with pytest.raises(ServerError, match=match):
        run_adapter(RecordingManager([output]), tokenizer, [[1]], SamplingParams(max_new_tokens=4))


def test_server_backend_finish_reason_without_a_stop_reason(tokenizer):
    outs = [TokenOutput(token_ids=[5, 6, 7, 8], log_probs=[-1.0] * 4), TokenOutput(token_ids=[5], log_probs=[-1.0])]
    gens = run_adapter(RecordingManager(outs), tokenizer, [[1], [2]], SamplingParams(max_new_tokens=4))
    assert [g[0].finish_reason for g in gens] == ["length", "stop"]


def test_server_backend_refuses_its_own_event_loop_thread(tokenizer):
    async def main():
        backend = ServerManagerBackend(RecordingManager([]), tokenizer, asyncio.get_running_loop(), "s")
        backend.generate([[1]], SamplingParams())

    with pytest.raises(RuntimeError, match="deadlock"):
        asyncio.run(main())
