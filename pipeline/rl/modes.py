"""Training modes (SPEC sections 2 and 5.4) and how each treats each role."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from pipeline.io import InputError

Mode = Literal[
    "stage1",
    "opd",
    "outcome_rl_searcher",
    "base_teacher",
    "no_searcher_supervision",
    "prompted_critic",
]
MODES: tuple[str, ...] = get_args(Mode)
ROLES: tuple[str, ...] = ("leader", "searcher", "answerer")
ROLE_IDS: dict[str, int] = {role: i for i, role in enumerate(ROLES)}


@dataclass(frozen=True)
class RolePolicy:
    """How one role is trained in one mode.

    kind: "grpo" (group-relative outcome advantage), "opd" (token-level distillation
    advantage), "none" (no loss: loss_mask forced to 0).
    scope: the GRPO group: "question" or "request" (an Answerer answer request).
    unit: what carries one reward inside a group: "trajectory" (one value per team
    rollout, shared by all the role's samples of that trajectory) or "sample".
    """

    kind: Literal["grpo", "opd", "none"]
    scope: Literal["question", "request", ""] = ""
    unit: Literal["trajectory", "sample", ""] = ""
    # "reward": units are this role's samples, reward from `reward`. "r_em": units are every
    # trajectory of the batch (also those where the role never acted), reward R_EM: the
    # Leader-style advantage that SPEC 5.4 gives the outcome-RL Searcher.
    reward_column: Literal["reward", "r_em"] = "reward"


_LEADER = RolePolicy("grpo", "question", "trajectory")
_ANSWERER = RolePolicy("grpo", "request", "sample")
_OPD = RolePolicy("opd")

ROLE_POLICY: dict[str, dict[str, RolePolicy]] = {
    "stage1": {"searcher": RolePolicy("grpo", "question", "trajectory"), "answerer": _ANSWERER},
    "opd": {"leader": _LEADER, "searcher": _OPD, "answerer": _ANSWERER},
    "base_teacher": {"leader": _LEADER, "searcher": _OPD, "answerer": _ANSWERER},
    "outcome_rl_searcher": {
        "leader": _LEADER,
        "searcher": RolePolicy("grpo", "question", "trajectory", reward_column="r_em"),
        "answerer": _ANSWERER,
    },
    "no_searcher_supervision": {"leader": _LEADER, "searcher": RolePolicy("none"), "answerer": _ANSWERER},
    "prompted_critic": {
        "leader": _LEADER,
        "searcher": RolePolicy("grpo", "question", "sample"),
        "answerer": _ANSWERER,
    },
}

WORKFLOW: dict[str, str] = {mode: ("cascade" if mode == "stage1" else "hierarchy") for mode in MODES}

# Modes whose Searcher OPD needs a Teacher: there a missing teacher_logp is an error.
# Elsewhere (Stage II baselines) NaN teacher_logp means "no Teacher": no KL-in-reward term.
TEACHER_REQUIRED: frozenset[str] = frozenset({"opd", "base_teacher"})
# Stage I trains the Teacher itself: there is no Teacher, so never a KL term.
NO_KL_MODES: frozenset[str] = frozenset({"stage1"})
KL_ROLES: tuple[str, ...] = ("leader", "answerer")


def check_mode(mode: str) -> str:
    """Return `mode` or raise InputError naming the allowed values."""
    if mode not in MODES:
        raise InputError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")
    return mode


def trained_roles(mode: str) -> tuple[str, ...]:
    """Roles whose tokens carry loss in `mode` (loss_mask may be 1 only for these)."""
    return tuple(role for role, p in ROLE_POLICY[check_mode(mode)].items() if p.kind != "none")
