"""Seed sets: every seed of a profile changed at once, for independent draws of one recipe.

configs/seed_sets.yaml names each set's seeds; `write_seed_set` puts one into params.yaml by
rewriting only those integers in the file's text (pipeline.params_edit: its comments, layout and
every other value stay byte for byte), so a checkout switches draws with one command and a diff
shows only the seeds.
No stage imports this module: it edits the stages' input, not their code.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import ruamel.yaml

from pipeline.errors import InputError
from pipeline.io import read_text, write_text
from pipeline.params_edit import Scalar, check_literals, locate, splice
from pipeline.systems import TEACHER, TRAINED

SEED_SETS_FILE = Path("configs/seed_sets.yaml")


def seed_keys(profile: str) -> dict[str, tuple[str, ...]]:
    """Each field of a seed set and the params.yaml keys (dotted) it sets."""
    systems = f"{profile}.train.systems"
    return {
        "world": (f"{profile}.data.world.seed",),
        "data": (f"{profile}.data.seed",),
        "base_model": (f"{profile}.base_model.seed",),
        "validate_masks": (f"{profile}.validate_masks.seed",),
        "eval": (f"{profile}.eval.seed",),
        "teacher": (f"{systems}.{TEACHER}.seed",),
        "stage2": tuple(f"{systems}.{s.name}.seed" for s in TRAINED if s.name != TEACHER),
        "bootstrap": ("common.eval.bootstrap_seed",),
    }


@dataclass(frozen=True)
class SeedSets:
    profile: str
    sets: dict[str, dict[str, int]]

    def values(self, name: str) -> dict[str, int]:
        """params.yaml key -> seed for set `name`."""
        if name not in self.sets:
            raise InputError(f"seed set {name!r}: expected one of {', '.join(self.sets)}")
        keys = seed_keys(self.profile)
        return {key: value for field, value in self.sets[name].items() for key in keys[field]}


@dataclass(frozen=True)
class Change:
    key: str
    old: int
    new: int


def load_seed_sets(path: Path = SEED_SETS_FILE) -> SeedSets:
    """The seed sets of `path`, each checked to give every field one integer."""
    try:
        doc = ruamel.yaml.YAML(typ="safe").load(Path(path).read_text())
    except (OSError, ruamel.yaml.YAMLError) as err:
        raise InputError(f"{path}: cannot read the seed sets: {err}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("profile"), str) or not isinstance(doc.get("sets"), dict) \
            or not doc["sets"]:
        raise InputError(f"{path}: expected a mapping with `profile` (a profile name) and `sets` (at least one)")
    fields = set(seed_keys(doc["profile"]))
    sets = {}
    for name, seeds in doc["sets"].items():
        if not isinstance(seeds, dict) or set(seeds) != fields:
            got = sorted(seeds) if isinstance(seeds, dict) else type(seeds).__name__
            raise InputError(f"{path}: sets.{name}: expected the fields {', '.join(sorted(fields))}; got {got}")
        for field, value in seeds.items():
            if type(value) is not int:
                raise InputError(f"{path}: sets.{name}.{field}: expected an integer, got {value!r}")
        sets[str(name)] = dict(seeds)
    return SeedSets(doc["profile"], sets)


def _seeds(text: str, keys, params_name: str) -> dict[str, Scalar]:
    """Where in `text` the integer of each dotted key is written, and its value; anything but an
    integer literal is refused."""
    scalars = locate(text, keys, params_name)
    for s in scalars.values():
        if not isinstance(s.value, int) or isinstance(s.value, bool):
            raise InputError(f"{params_name}, line {s.line + 1}: {s.key}: expected an integer seed, got {s.value!r}")
    check_literals(scalars.values(), params_name)
    return scalars


def apply_seed_values(text: str, values: dict[str, int], params_name: str = "params.yaml") -> tuple[str, list[Change]]:
    """`text` with each key's integer replaced by its value in `values`, and what changed
    (pipeline.params_edit, with every old and new value checked to be an integer)."""
    for key, new in values.items():
        if not isinstance(new, int) or isinstance(new, bool):
            raise InputError(f"{key}: expected an integer seed, got {new!r}")
    scalars = _seeds(text, values, params_name)
    new_text = splice(text, scalars, values, params_name)
    return new_text, [Change(key, scalars[key].value, new) for key, new in values.items() if new != scalars[key].value]


def current_seed_set(params: Path, seed_sets: SeedSets) -> str | None:
    """The name of the set whose seeds `params` holds, or None."""
    names = list(seed_sets.sets)
    held = {key: s.value for key, s in _seeds(read_text(params), seed_sets.values(names[0]), str(params)).items()}
    return next((name for name in names if seed_sets.values(name) == held), None)


def write_seed_set(params: Path, name: str, seed_sets: SeedSets) -> list[Change]:
    """Put seed set `name` into `params` (atomically); returns the seeds that changed."""
    new_text, changes = apply_seed_values(read_text(params), seed_sets.values(name), str(params))
    if changes:
        write_text(params, new_text)
    return changes
