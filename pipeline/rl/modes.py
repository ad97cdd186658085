"""The training modes (SPEC sections 2, 5 and 5.4): one frozen record per mode, the one
home of everything that tells the modes apart. The trainer, the rewards, the advantages, the
stages and the verl path all read these records; none keeps its own per-mode table.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Literal, Mapping

from pipeline.domain import ROLES
from pipeline.errors import InputError

ROLE_IDS: dict[str, int] = {role: i for i, role in enumerate(ROLES)}
KL_ROLES: tuple[str, ...] = ("leader", "answerer")  # the roles whose reward carries the KL-to-Teacher term


@dataclass(frozen=True)
class RolePolicy:
    """How one role is trained in one mode.

    kind: "grpo" (group-relative outcome advantage), "opd" (token-level distillation
    advantage), "none" (no loss: loss_mask forced to 0).
    scope: the GRPO group: "question" or "request" (an Answerer answer request).
    unit: what carries one reward inside a group: "trajectory" (one value per team
    rollout, shared by all the role's samples of that trajectory) or "sample".
    reward_column: "reward": the units are this role's samples, rewarded by `reward`;
    "r_em": the units are every trajectory of the batch (also those where the role never
    acted), rewarded by R_EM: the Leader-style advantage SPEC 5.4 gives the outcome-RL Searcher.
    """

    kind: Literal["grpo", "opd", "none"]
    scope: Literal["question", "request", ""] = ""
    unit: Literal["trajectory", "sample", ""] = ""
    reward_column: Literal["reward", "r_em"] = "reward"


@dataclass(frozen=True)
class TrainingMode:
    """One training mode.

    train_key: its entry under `<profile>.train.systems` in params.yaml, and its DVC stage.
    workflow: the workflow its rollouts run.
    roles: how each role that acts is trained.
    searcher_reward: the Searcher's scalar reward: "stage1" (0.9 R_EM + 0.1 b_S), "outcome"
    (R_EM), "critic" (0.5 R_EM + 0.5 judge/10), or "none" (OPD or no loss: no scalar reward).
    teacher: the frozen Teacher's weights folder under data/models/ (None: no Teacher). A mode
    with a Teacher puts the KL-to-Teacher term in the Leader and Answerer rewards, and scores
    every sample with a loss token (SPEC 5.2).
    judge: the Prompted-Critic judge's weights folder (None: no judge).
    """

    name: str
    train_key: str
    workflow: Literal["cascade", "hierarchy"]
    roles: Mapping[str, RolePolicy]
    searcher_reward: Literal["stage1", "outcome", "critic", "none"]
    teacher: str | None = None
    judge: str | None = None

    @property
    def trained_roles(self) -> tuple[str, ...]:
        """Roles whose tokens carry loss (loss_mask may be 1 only for these)."""
        return tuple(role for role, p in self.roles.items() if p.kind != "none")

    @property
    def kl_in_reward(self) -> bool:
        return self.teacher is not None


_LEADER = RolePolicy("grpo", "question", "trajectory")
_ANSWERER = RolePolicy("grpo", "request", "sample")
_OPD = RolePolicy("opd")


def _roles(**policies: RolePolicy) -> Mapping[str, RolePolicy]:
    return MappingProxyType(dict(policies))


MODES: Mapping[str, TrainingMode] = MappingProxyType({m.name: m for m in (
    TrainingMode("stage1", "teacher", "cascade",
                 _roles(searcher=RolePolicy("grpo", "question", "trajectory"), answerer=_ANSWERER), "stage1"),
    TrainingMode("opd", "team", "hierarchy",
                 _roles(leader=_LEADER, searcher=_OPD, answerer=_ANSWERER), "none", teacher="teacher"),
    TrainingMode("base_teacher", "base_teacher", "hierarchy",
                 _roles(leader=_LEADER, searcher=_OPD, answerer=_ANSWERER), "none", teacher="base"),
    TrainingMode("outcome_rl_searcher", "outcome_rl_searcher", "hierarchy",
                 _roles(leader=_LEADER, searcher=RolePolicy("grpo", "question", "trajectory", reward_column="r_em"),
                        answerer=_ANSWERER), "outcome", teacher="teacher"),
    TrainingMode("no_searcher_supervision", "no_searcher_supervision", "hierarchy",
                 _roles(leader=_LEADER, searcher=RolePolicy("none"), answerer=_ANSWERER), "none", teacher="teacher"),
    TrainingMode("prompted_critic", "prompted_critic", "hierarchy",
                 _roles(leader=_LEADER, searcher=RolePolicy("grpo", "question", "sample"), answerer=_ANSWERER),
                 "critic", teacher="teacher", judge="base"),
)})
BY_TRAIN_KEY: Mapping[str, TrainingMode] = MappingProxyType({m.train_key: m for m in MODES.values()})


def get_mode(name: str) -> TrainingMode:
    """The mode called `name`, or InputError naming the allowed values."""
    try:
        return MODES[name]
    except KeyError:
        raise InputError(f"mode: expected one of {', '.join(MODES)}, got {name!r}") from None


def mode_of_key(key: str) -> TrainingMode:
    """The mode trained by `<profile>.train.systems.<key>`."""
    try:
        return BY_TRAIN_KEY[key]
    except KeyError:
        raise InputError(f"train.systems: unknown key {key!r}; expected one of {', '.join(BY_TRAIN_KEY)}") from None
