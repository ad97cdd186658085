"""The agent loop verl runs for every (question, session): one team trajectory, many samples.

Registered with verl as `multiagent_opd_team`. Its settings (constructor keyword arguments)
come from an entry of verl's `rollout.agent.agent_loop_config_path` file, which
pipeline.verl_agent.launch writes; missing ones fall back to environment variables:

  system         the trained system (params.yaml `train.systems` key)             MAOPD_SYSTEM
  params         params.yaml path; profile from MAOPD_PROFILE or the file        MAOPD_PARAMS
  retriever_url  the Search-R1 /retrieve server                                  MAOPD_RETRIEVER_URL
  teacher_url    SGLang server of the frozen Teacher (systems that use one)      MAOPD_TEACHER_URL
  judge_url      SGLang server of the Prompted-Critic judge (the base model)     MAOPD_JUDGE_URL
  send_seed      send each entry's sampling_seed to the rollout servers (default false: SGLang
                 samples by seed only with deterministic inference, and versions without
                 sampling_seed reject the key)

`run` reads the question from the row's `extra_info` and the trajectory index from verl's
`session_id` (V1 trainer; 0 otherwise), runs pipeline.verl_agent.agent_run in a worker thread
(the policy calls go back to this event loop through ServerManagerBackend; the Teacher and the
judge are scored over HTTP with SGLangBackend), and returns one AgentLoopOutput per sample.
verl's own sampling_params are not used: the rollout numbers come from params.yaml (the stage
configs set verl's to the same values).
"""

from __future__ import annotations

import asyncio
import functools
import os
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from verl.experimental.agent_loop.agent_loop import AgentLoopBase, AgentLoopOutput, register

from pipeline.config import load_params
from pipeline.errors import InputError
from pipeline.rl.train_params import TrainConfig, train_config
from pipeline.systems import trained_system
from pipeline.verl_agent.agent_run import question_row, run_trajectory
from pipeline.verl_agent.outputs import to_agent_loop_outputs
from pipeline.verl_agent.server import ServerManagerBackend

AGENT_NAME = "multiagent_opd_team"
_EXECUTOR: ThreadPoolExecutor | None = None


def _executor(max_threads: int) -> ThreadPoolExecutor:
    """One pool per process: each running trajectory holds a thread while it waits on the server."""
    global _EXECUTOR
    if _EXECUTOR is None:
        _EXECUTOR = ThreadPoolExecutor(max_workers=max_threads, thread_name_prefix="maopd-team")
    return _EXECUTOR


def _setting(value: Any, env: str, default: Any = None) -> Any:
    return value if value is not None else os.environ.get(env, default)


@functools.lru_cache(maxsize=16)
def _train_config(params: str, profile: str | None, system: str) -> TrainConfig:
    """verl builds a new agent loop for every run: read params.yaml once per process."""
    return train_config(load_params(params, profile=profile), system)


@register(AGENT_NAME)
class TeamAgentLoop(AgentLoopBase):
    def __init__(
        self,
        *args: Any,
        system: str | None = None,
        params: str | None = None,
        profile: str | None = None,
        retriever_url: str | None = None,
        teacher_url: str | None = None,
        judge_url: str | None = None,
        send_seed: bool = False,
        max_threads: int = 256,
        http_timeout_s: float = 600.0,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.cfg = _train_config(
            str(_setting(params, "MAOPD_PARAMS", "params.yaml")), profile,
            str(_setting(system, "MAOPD_SYSTEM", "multiagent_opd")),
        )
        self.system = trained_system(self.cfg.system)
        self.retriever_url = _setting(retriever_url, "MAOPD_RETRIEVER_URL")
        self.teacher_url = _setting(teacher_url, "MAOPD_TEACHER_URL")
        self.judge_url = _setting(judge_url, "MAOPD_JUDGE_URL")
        self.send_seed = bool(send_seed)
        self.max_threads = int(max_threads)
        self.http_timeout_s = float(http_timeout_s)

    # -- the services a trajectory talks to (tests replace these) --------------------------

    def open_retriever(self):
        from pipeline.retrieval.client import HttpRetriever

        if not self.retriever_url:
            raise InputError("retriever_url: expected the URL of the /retrieve server (MAOPD_RETRIEVER_URL)")
        return HttpRetriever(self.retriever_url, timeout=self.http_timeout_s)

    def open_scorer(self, url: str | None, what: str):
        """An SGLangBackend on `url` (the Teacher or the judge); InputError without a URL."""
        from pipeline.policy.sglang_backend import SGLangBackend

        if not url:
            raise InputError(f"{what}_url: {self.cfg.system} needs the {what} server's URL")
        return SGLangBackend(url, tokenizer=self.tokenizer, timeout_s=self.http_timeout_s)

    # -- one run ---------------------------------------------------------------------------

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> list[AgentLoopOutput]:
        extra_info = kwargs.get("extra_info") or {}
        question = question_row(extra_info)
        dev = str(extra_info.get("split", "train")) != "train"
        k = int(kwargs.get("session_id", 0))
        step = int(kwargs.get("global_steps", 0) or 0)
        loop = asyncio.get_running_loop()
        policy = ServerManagerBackend(
            self.server_manager, self.tokenizer, loop, session=f"{question['question_id']}/t{k}",
            send_seed=self.send_seed,
        )
        training = self.system.training
        teacher = self.open_scorer(self.teacher_url, "teacher") if training.teacher and not dev else None
        judge = self.open_scorer(self.judge_url, "judge") if training.judge and not dev else None
        retriever = self.open_retriever()
        began = time.perf_counter()
        try:
            samples, tokens = await loop.run_in_executor(
                _executor(self.max_threads),
                lambda: run_trajectory(question, k, self.cfg, policy, retriever, step=step,
                                       teacher=teacher, judge=judge, dev=dev),
            )
        finally:
            for service in (retriever, teacher, judge):
                close = getattr(service, "close", None) or getattr(getattr(service, "client", None), "close", None)
                if close is not None:
                    close()
        steps = policy.global_steps
        return to_agent_loop_outputs(
            samples, tokens, self.cfg.system, self.cfg.opd_beta,
            prompt_length=self.rollout_config.prompt_length, response_length=self.rollout_config.response_length,
            metrics={"generate_sequences": time.perf_counter() - began},
            extra={"min_global_steps": min(steps) if steps else None,
                   "max_global_steps": max(steps) if steps else None},
        )
