"""The one registry of the eight systems (docs/method.md §2 and §5): each system's name, display
name, workflow, how it is trained and its published numbers.

Every other place that names a system reads this table: the DVC stages (`train@<name>`,
`evaluate@<name>`, generated into dvc.yaml by pipeline.dag), the params keys
(`<profile>.train.systems.<name>`), the model, audit, checkpoint and evaluation folders
(`data/{models,audit,checkpoints,eval}/<name>`), the MLflow run names (the stage names) and
registered models (the system names), the report and the Prefect flows. Each system also has
one fixed colour: the report's figures, the `dvc plots` templates (.dvc/plots/, generated from
this table) and the MLflow UI (the run tag `mlflow.runColor`) all draw it in that colour.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Literal

from pipeline.domain import ROLES
from pipeline.errors import InputError
from pipeline.paths import model_dir

BASE_WEIGHTS = "base"  # data/models/base: the base model every system starts from
ROLE_IDS: dict[str, int] = {role: i for i, role in enumerate(ROLES)}
KL_ROLES: tuple[str, ...] = ("leader", "answerer")  # the roles whose reward carries the KL-to-Teacher term
# The run tag MLflow 3's UI reads a run's colour from (charts, runs table); a hex colour.
RUN_COLOUR_TAG = "mlflow.runColor"


@dataclass(frozen=True)
class RolePolicy:
    """How one role is trained.

    kind: "grpo" (group-relative outcome advantage), "opd" (token-level distillation
    advantage), "none" (no loss: loss_mask forced to 0).
    scope: the GRPO group: "question" or "request" (an Answerer answer request).
    unit: what carries one reward inside a group: "trajectory" (one value per team
    rollout, shared by all the role's samples of that trajectory) or "sample".
    reward_column: "reward": the units are this role's samples, rewarded by `reward`;
    "r_em": the units are every trajectory of the batch (also those where the role never
    acted), rewarded by R_EM: the Leader-style advantage docs/method.md §5.4 gives the
    outcome-RL Searcher.
    """

    kind: Literal["grpo", "opd", "none"]
    scope: Literal["question", "request", ""] = ""
    unit: Literal["trajectory", "sample", ""] = ""
    reward_column: Literal["reward", "r_em"] = "reward"


@dataclass(frozen=True)
class Training:
    """How a trained system is trained.

    roles: how each role that acts is trained.
    searcher_reward: the Searcher's scalar reward: "em_and_behaviour" (0.9 R_EM + 0.1 b_S,
    Stage I), "outcome" (R_EM), "critic" (0.5 R_EM + 0.5 judge/10), or "none" (OPD or no loss:
    no scalar reward).
    teacher: the frozen Teacher's weights folder under data/models/ (None: no Teacher). With a
    Teacher, the KL-to-Teacher term enters the Leader and Answerer rewards and every sample
    with a loss token is scored by it (docs/method.md §5.2).
    judge: the Prompted-Critic judge's weights folder (None: no judge).
    """

    roles: Mapping[str, RolePolicy]
    searcher_reward: Literal["em_and_behaviour", "outcome", "critic", "none"]
    teacher: str | None = None
    judge: str | None = None


@dataclass(frozen=True)
class System:
    name: str  # the one name: DVC stages, folders, params keys, MLflow, the report
    label: str  # as printed for people (the report, figures)
    workflow: Literal["cascade", "hierarchy"]
    training: Training | None  # None: the base model's weights, not trained
    published_avg4: float  # docs/method.md §9, macro avg@4 (published)
    published_pass4: float
    colour: str  # "#rrggbb": the one colour of the system in every figure, plot and MLflow chart

    @property
    def trained(self) -> bool:
        return self.training is not None

    @property
    def weights(self) -> str:
        """Its weights folder under data/models/."""
        return self.name if self.trained else BASE_WEIGHTS

    @property
    def train_stage(self) -> str | None:
        """Its training stage in dvc.yaml (and MLflow run name); None when not trained."""
        return f"train@{self.name}" if self.trained else None

    @property
    def eval_stage(self) -> str:
        return f"evaluate@{self.name}"

    @property
    def run_tags(self) -> dict[str, str]:
        """The tags of every MLflow run of this system: its name and its colour."""
        return {"system": self.name, RUN_COLOUR_TAG: self.colour}

    @property
    def roles(self) -> Mapping[str, RolePolicy]:
        return self.training.roles if self.training else MappingProxyType({})

    @property
    def trained_roles(self) -> tuple[str, ...]:
        """Roles whose tokens carry loss (loss_mask may be 1 only for these)."""
        return tuple(role for role, p in self.roles.items() if p.kind != "none")

    @property
    def kl_in_reward(self) -> bool:
        return self.training is not None and self.training.teacher is not None

    def model_dir(self, root: Path) -> Path:
        return model_dir(root, self.weights)


TEACHER = "c_mas_rl"  # the Stage-I Teacher: the Stage-II systems distil from its weights

_LEADER = RolePolicy("grpo", "question", "trajectory")
_ANSWERER = RolePolicy("grpo", "request", "sample")
_OPD = RolePolicy("opd")


def _train(searcher: RolePolicy, searcher_reward: str, teacher: str | None = TEACHER, judge: str | None = None,
           leader: RolePolicy | None = _LEADER) -> Training:
    roles = {"leader": leader, "searcher": searcher, "answerer": _ANSWERER}
    return Training(MappingProxyType({r: p for r, p in roles.items() if p is not None}),
                    searcher_reward, teacher, judge)


SYSTEMS: tuple[System, ...] = (
    System("c_mas_base", "C-MAS base", "cascade", None, 25.09, 34.02, "#7f7f7f"),
    System("c_mas_rl", "C-MAS + RL (Teacher)", "cascade",
           _train(RolePolicy("grpo", "question", "trajectory"), "em_and_behaviour", teacher=None, leader=None),
           36.07, 45.97, "#ff7f0e"),
    System("h_mas_base", "H-MAS base", "hierarchy", None, 28.60, 39.32, "#8c564b"),
    System("prompted_critic", "Prompted Critic", "hierarchy",
           _train(RolePolicy("grpo", "question", "sample"), "critic", judge=BASE_WEIGHTS), 34.62, 45.96,
           "#1f77b4"),
    System("multiagent_opd", "MultiAgent-OPD", "hierarchy", _train(_OPD, "none"), 38.68, 48.73, "#d62728"),
    System("ablation_outcome_rl_searcher", "ablation: outcome-RL Searcher", "hierarchy",
           _train(RolePolicy("grpo", "question", "trajectory", reward_column="r_em"), "outcome"), 17.78, 22.79,
           "#9467bd"),
    System("ablation_base_teacher", "ablation: base Teacher", "hierarchy",
           _train(_OPD, "none", teacher=BASE_WEIGHTS), 29.50, 40.86, "#2ca02c"),
    System("ablation_no_searcher_supervision", "ablation: no Searcher supervision", "hierarchy",
           _train(RolePolicy("none"), "none"), 29.82, 39.86, "#17becf"),
)

BY_NAME: Mapping[str, System] = MappingProxyType({s.name: s for s in SYSTEMS})
TRAINED: tuple[System, ...] = tuple(s for s in SYSTEMS if s.trained)
ABLATIONS: tuple[str, ...] = tuple(s.name for s in SYSTEMS if s.name.startswith("ablation_"))
COLOURS: Mapping[str, str] = MappingProxyType({s.name: s.colour for s in SYSTEMS})


def system(name: str) -> System:
    """The system called `name`, or InputError naming the allowed values."""
    try:
        return BY_NAME[name]
    except KeyError:
        raise InputError(f"system: expected one of {', '.join(BY_NAME)}, got {name!r}") from None


def trained_system(name: str) -> System:
    """The trained system called `name` (a `<profile>.train.systems` key), or InputError."""
    found = BY_NAME.get(name)
    if found is None or not found.trained:
        raise InputError(f"system: expected a trained system, one of {', '.join(s.name for s in TRAINED)}; "
                         f"got {name!r}")
    return found
