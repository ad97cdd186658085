"""Seed sets: every seed of a profile changed at once, for independent draws of one recipe.

configs/seed_sets.yaml names each set's seeds; `write_seed_set` puts one into params.yaml by
rewriting only those integers in the file's text (its comments, layout and every other value stay
byte for byte), so a checkout switches draws with one command and a diff shows only the seeds.
No stage imports this module: it edits the stages' input, not their code.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import ruamel.yaml

from pipeline.errors import InputError
from pipeline.io import write_text
from pipeline.systems import TEACHER, TRAINED

SEED_SETS_FILE = Path("configs/seed_sets.yaml")
_INTEGER = re.compile(r"-?\d+")


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
    if not isinstance(doc, dict) or not isinstance(doc.get("profile"), str) or not isinstance(doc.get("sets"), dict):
        raise InputError(f"{path}: expected a mapping with `profile` (a profile name) and `sets`")
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


def _value_position(doc, key: str, params_name: str) -> tuple[int, int, int]:
    """(line, column, value) of the integer at dotted `key` in a round-trip-loaded document."""
    node = doc
    *parents, leaf = key.split(".")
    for depth, part in enumerate(parents):
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            raise InputError(f"{params_name}: no key {'.'.join(parents[:depth + 1])} (needed for {key})")
    if not isinstance(node, dict) or leaf not in node:
        raise InputError(f"{params_name}: no key {key}")
    value = node[leaf]
    line, column = node.lc.value(leaf)
    if not isinstance(value, int) or isinstance(value, bool):
        raise InputError(f"{params_name}, line {line + 1}: {key}: expected an integer seed, got {value!r}")
    return line, column, value


def apply_seed_values(text: str, values: dict[str, int], params_name: str = "params.yaml") -> tuple[str, list[Change]]:
    """`text` with each key's integer replaced by its value in `values`, and what changed."""
    try:
        doc = ruamel.yaml.YAML().load(text)
    except ruamel.yaml.YAMLError as err:
        raise InputError(f"{params_name}: not valid YAML: {err}") from None
    lines = text.splitlines(keepends=True)
    edits, changes = [], []
    for key, new in values.items():
        line, column, old = _value_position(doc, key, params_name)
        token = _INTEGER.match(lines[line], column)
        if token is None or int(token.group()) != old:
            raise InputError(f"{params_name}, line {line + 1}: {key}: expected the literal integer {old} "
                             f"at column {column + 1}")
        edits.append((line, token.start(), token.end(), new))
        if new != old:
            changes.append(Change(key, old, new))
    for line, start, end, new in sorted(edits, reverse=True):
        lines[line] = f"{lines[line][:start]}{new}{lines[line][end:]}"
    return "".join(lines), changes


def current_seed_set(params: Path, seed_sets: SeedSets) -> str | None:
    """The name of the set whose seeds `params` holds, or None."""
    text = Path(params).read_text()
    for name in seed_sets.sets:
        if not apply_seed_values(text, seed_sets.values(name), str(params))[1]:
            return name
    return None


def write_seed_set(params: Path, name: str, seed_sets: SeedSets) -> list[Change]:
    """Put seed set `name` into `params` (atomically); returns the seeds that changed."""
    params = Path(params)
    try:
        text = params.read_text()
    except OSError as err:
        raise InputError(f"{params}: cannot read: {err}") from None
    new_text, changes = apply_seed_values(text, seed_sets.values(name), str(params))
    if changes:
        write_text(params, new_text)
    return changes
