"""The per-trajectory state machine of both workflows, advanced one environment step at a time.

Phases: the hierarchy starts at "leader", the cascade at "searchers" (one Searcher whose
task is the question); both end with "answerer" then "done". Each tick the driver asks
every team for its model requests, hands back the generations, runs the searches, then
calls `end_tick`, where the phase changes. See `pipeline.agents.workflows` for the rules.
"""

from __future__ import annotations

from dataclasses import dataclass

from pipeline.agents.prompts import Prompts, ReportLine
from pipeline.agents.protocol import Answer, AnswerWith, Dispatch, Malformed, action_name, parse_action
from pipeline.agents.searcher import SearcherAgent
from pipeline.agents.trajectory import Call, Segment, Trajectory
from pipeline.agents.workflow_config import WorkflowConfig
from pipeline.policy.base import Generation, PolicyBackend


@dataclass
class ModelRequest:
    """One generation request of one tick: a prompt (full context) for one call."""

    team: Team
    call: Call
    prompt_ids: list[int]
    max_new_tokens: int
    searcher: SearcherAgent | None = None


class Team:
    def __init__(
        self,
        trajectory: Trajectory,
        cfg: WorkflowConfig,
        prompts: Prompts,
        backend: PolicyBackend,
        seed: int = 0,
    ) -> None:
        self.traj = trajectory
        self.seed = seed  # the rollout's sampling seed (pipeline.agents.driver.request_seed)
        self.order = 0  # its place among the teams driven together: an engine admits earlier teams first
        self.cfg = cfg
        self.prompts = prompts
        self.backend = backend
        self.budget = cfg.budget(trajectory.workflow)
        self.reports: list[ReportLine] = []
        self.searchers: list[SearcherAgent] = []
        self.answer_calls: list[Call] = []
        self.leader_call: Call | None = None
        self._leader_decision: Dispatch | AnswerWith | Malformed | None = None
        self._searched_this_tick = False
        self._next_call_id = 0
        self._n_requests = 0
        if trajectory.workflow == "cascade":
            self.phase = "searchers"
            self._start_wave([trajectory.question], step=0, wave=-1)
        else:
            self.phase = "leader"

    @property
    def done(self) -> bool:
        return self.phase == "done"

    # -- calls -----------------------------------------------------------------------------

    def _new_call(self, role: str, agent_id: str, step: int, wave: int, prompt: str, **extra) -> Call:
        ids = list(self.backend.encode_prompt(prompt))
        call_id = extra.pop("call_id", None)
        if call_id is None:
            call_id, self._next_call_id = self._next_call_id, self._next_call_id + 1
        sample_id = f"{self.traj.trajectory_id}/c{call_id}"
        if role == "answerer":
            sample_id += f"/k{extra['candidate_id']}"
        call = Call(
            sample_id=sample_id, role=role, call_id=call_id, agent_id=agent_id, step=step,
            wave=wave, prompt_ids=ids, prompt_text=self.backend.decode(ids), **extra,
        )
        self.traj.calls.append(call)
        return call

    def _start_wave(self, tasks: list[str], step: int, wave: int) -> None:
        self.phase = "searchers"
        self.searchers = []
        for slot, task in enumerate(tasks):
            call = self._new_call(
                "searcher", f"searcher-{max(wave, 0)}-{slot}", step, wave,
                self.prompts.searcher_prompt(task), task=task,
            )
            report_id = f"R{len(self.reports) + slot + 1}"
            call.report_id = report_id
            self.searchers.append(SearcherAgent(call, report_id, self.cfg.max_searcher_turns))

    def _start_answer(self, reports: list[ReportLine], step: int, forced: bool) -> None:
        self.phase = "answerer"
        self.traj.forced_answer = forced
        self.traj.handed = [r.report_id for r in reports]
        call_id, self._next_call_id = self._next_call_id, self._next_call_id + 1
        request_id = f"{self.traj.trajectory_id}/a0"
        wave = -1 if self.traj.workflow == "cascade" else self.traj.waves
        prompt = self.prompts.answerer_prompt(self.traj.question, reports)
        self.answer_calls = [
            self._new_call(
                "answerer", "answerer", step, wave, prompt, call_id=call_id,
                request_id=request_id, candidate_id=k, is_final_request=True,
            )
            for k in range(self.cfg.n_candidates)
        ]

    def _request(self, call: Call, searcher: SearcherAgent | None = None) -> ModelRequest:
        context = call.context_ids
        call.input_tokens += len(context)
        return ModelRequest(self, call, context, self.cfg.max_new_tokens(call.role), searcher)

    # -- one tick --------------------------------------------------------------------------

    def requests(self, step: int) -> list[ModelRequest]:
        """The model calls this team makes in this tick."""
        if self.phase == "leader":
            prompt = self.prompts.leader_prompt(self.traj.question, self.reports, self.cfg.max_parallel)
            self.leader_call = self._new_call("leader", "leader", step, self.traj.waves, prompt)
            return [self._request(self.leader_call)]
        if self.phase == "searchers":
            return [self._request(s.call, s) for s in self.searchers if not s.done]
        if self.phase == "answerer":
            return [self._request(c) for c in self.answer_calls]
        return []

    def receive(self, request: ModelRequest, gen: Generation, step: int) -> str | None:
        """Record a generation; return a search query to run for a Searcher, else None."""
        if request.searcher is not None:
            query_before = request.call.n_search
            query = request.searcher.take_turn(gen, last_step=step + 1 >= self.budget)
            self._searched_this_tick |= request.call.n_search > query_before
            return query
        call = request.call
        call.segments.append(Segment("generated", list(gen.token_ids), list(gen.logprobs), gen.text))
        call.n_turns += 1
        call.output_tokens += len(gen.token_ids)
        call.finish_reason = gen.finish_reason
        known = [r.report_id for r in self.reports]
        parsed = parse_action(gen.text, call.role, max_parallel=self.cfg.max_parallel, known_reports=known)
        call.action = action_name(parsed)
        if isinstance(parsed, Malformed):
            call.malformed, call.malformation, call.malformation_detail = True, parsed.kind, parsed.detail
        elif isinstance(parsed, Answer):
            call.answer = parsed.text
        if call.role == "leader":
            self._leader_decision = parsed  # type: ignore[assignment]
        return None

    def end_tick(self, step: int) -> None:
        """Advance the phase after every agent of this tick has acted."""
        traj = self.traj
        traj.steps = step + 1
        if self._searched_this_tick:
            traj.c_tool += 1
            self._searched_this_tick = False
        budget_left = step + 1 < self.budget
        if self.phase == "leader":
            decision = self._leader_decision
            if isinstance(decision, Dispatch):
                traj.waves += 1
                if budget_left:
                    self._start_wave(list(decision.tasks), step + 1, traj.waves - 1)
                else:
                    self._start_answer(self.reports, step + 1, forced=True)
            elif isinstance(decision, AnswerWith):
                chosen = list(dict.fromkeys(decision.report_ids))
                by_id = {r.report_id: r for r in self.reports}
                self._start_answer([by_id[i] for i in chosen], step + 1, forced=False)
            else:
                self._start_answer(self.reports, step + 1, forced=True)
        elif self.phase == "searchers":
            if not budget_left:
                for s in self.searchers:
                    s.cut()
            if all(s.done for s in self.searchers):
                self.reports.extend(ReportLine(s.report_id, s.call.task, s.call.report) for s in self.searchers)
                if traj.workflow == "cascade":
                    self._start_answer(self.reports, step + 1, forced=not self.searchers[0].call.reported)
                elif budget_left and traj.waves < self.cfg.max_waves:
                    self.phase = "leader"
                else:
                    self._start_answer(self.reports, step + 1, forced=True)
        elif self.phase == "answerer":
            self.phase = "done"
