"""The eight systems of SPEC section 2: which workflow, which weights, which training mode."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from pipeline.paths import model_dir


@dataclass(frozen=True)
class System:
    name: str  # evaluation name, the key of data/eval/<name>/
    label: str  # as printed in the report
    workflow: str  # cascade | hierarchy
    weights: str  # the model folder name under data/models/
    mode: str | None  # training mode of pipeline.rl (None: not trained)
    published_avg4: float  # SPEC section 9, macro avg@4 (published)
    published_pass4: float

    def model_dir(self, root: Path) -> Path:
        return model_dir(root, self.weights)


SYSTEMS: tuple[System, ...] = (
    System("c_mas_base", "C-MAS base", "cascade", "base", None, 25.09, 34.02),
    System("c_mas_rl", "C-MAS + RL (Teacher)", "cascade", "teacher", "stage1", 36.07, 45.97),
    System("h_mas_base", "H-MAS base", "hierarchy", "base", None, 28.60, 39.32),
    System("prompted_critic", "Prompted Critic", "hierarchy", "prompted_critic", "prompted_critic", 34.62, 45.96),
    System("multiagent_opd", "MultiAgent-OPD", "hierarchy", "team", "opd", 38.68, 48.73),
    System("ablation_outcome_rl_searcher", "ablation: outcome-RL Searcher", "hierarchy",
           "ablation_outcome_rl_searcher", "outcome_rl_searcher", 17.78, 22.79),
    System("ablation_base_teacher", "ablation: base Teacher", "hierarchy",
           "ablation_base_teacher", "base_teacher", 29.50, 40.86),
    System("ablation_no_searcher_supervision", "ablation: no Searcher supervision", "hierarchy",
           "ablation_no_searcher_supervision", "no_searcher_supervision", 29.82, 39.86),
)

BY_NAME = {s.name: s for s in SYSTEMS}
ABLATIONS = ("outcome_rl_searcher", "base_teacher", "no_searcher_supervision")


def system(name: str) -> System:
    try:
        return BY_NAME[name]
    except KeyError:
        raise KeyError(f"unknown system {name!r}; expected one of {', '.join(BY_NAME)}") from None


def trained_by(mode: str) -> System:
    """The system a training mode (pipeline.rl.modes) trains."""
    found = [s for s in SYSTEMS if s.mode == mode]
    if len(found) != 1:
        raise KeyError(f"training mode {mode!r} trains {len(found)} systems; expected exactly one")
    return found[0]
