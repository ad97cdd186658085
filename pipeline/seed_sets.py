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


@dataclass(frozen=True)
class _Token:
    line: int
    start: int
    end: int
    value: int


def _seed_tokens(text: str, keys, params_name: str) -> dict[str, _Token]:
    """Where in `text` the integer of each dotted key is written, and its value."""
    try:
        doc = ruamel.yaml.YAML().load(text)
    except ruamel.yaml.YAMLError as err:
        raise InputError(f"{params_name}: not valid YAML: {err}") from None
    lines = text.splitlines(keepends=True)
    tokens = {}
    for key in keys:
        line, column, value = _value_position(doc, key, params_name)
        token = _INTEGER.match(lines[line], column)
        if token is None or int(token.group()) != value:
            raise InputError(f"{params_name}, line {line + 1}: {key}: expected the literal integer {value} "
                             f"at column {column + 1}")
        tokens[key] = _Token(line, token.start(), token.end(), value)
    return tokens


def apply_seed_values(text: str, values: dict[str, int], params_name: str = "params.yaml") -> tuple[str, list[Change]]:
    """`text` with each key's integer replaced by its value in `values`, and what changed."""
    tokens = _seed_tokens(text, values, params_name)
    lines = text.splitlines(keepends=True)
    for key in sorted(tokens, key=lambda k: (tokens[k].line, tokens[k].start), reverse=True):
        t = tokens[key]
        lines[t.line] = f"{lines[t.line][:t.start]}{values[key]}{lines[t.line][t.end:]}"
    changes = [Change(key, tokens[key].value, new) for key, new in values.items() if new != tokens[key].value]
    return "".join(lines), changes


def _read(params: Path) -> str:
    try:
        return Path(params).read_text()
    except OSError as err:
        raise InputError(f"{params}: cannot read: {err}") from None


def current_seed_set(params: Path, seed_sets: SeedSets) -> str | None:
    """The name of the set whose seeds `params` holds, or None."""
    names = list(seed_sets.sets)
    tokens = _seed_tokens(_read(params), seed_sets.values(names[0]), str(params))
    held = {key: token.value for key, token in tokens.items()}
    return next((name for name in names if seed_sets.values(name) == held), None)


def write_seed_set(params: Path, name: str, seed_sets: SeedSets) -> list[Change]:
    """Put seed set `name` into `params` (atomically); returns the seeds that changed."""
    new_text, changes = apply_seed_values(_read(params), seed_sets.values(name), str(params))
    if changes:
        write_text(params, new_text)
    return changes
