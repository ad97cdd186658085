"""params.yaml edited as text: the scalar at a dotted key rewritten, every other byte kept.

Seed sets (pipeline.draws.seed_sets), draws (pipeline.draws.workspace: the seeds and the three precision
settings) and copies of a checkout (pipeline.checkout_copy: `profile`) all edit the file here.
The text is loaded round-trip (ruamel) to find where each value is written, only that token is
replaced, and the result is checked to load with exactly the new values; comments, layout and
every other value stay byte for byte, so a diff shows only what was set.

    locate        where the value of each dotted key is written (a Scalar: line, columns, value)
    splice        the text with those tokens replaced, checked
    set_values    locate + splice
    edit_file     set_values on a file, written (atomically) only when it changed
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ruamel.yaml
import yaml

from pipeline.errors import InputError
from pipeline.io import read_text, write_text

# One scalar as written: quoted, or plain up to a blank, a comment or a flow-style bracket or comma
_SCALAR = re.compile(r"\"[^\"\n]*\"|'[^'\n]*'|[^\s#,\[\]{}]+")


def _required(key: str) -> bool:
    """The default of `optional`: every key must be present."""
    return False


def _kind(value: Any) -> type:
    for kind in (bool, int, float, str):  # bool first: it is an int
        if isinstance(value, kind):
            return kind
    return type(value)


def same_value(a: Any, b: Any) -> bool:
    """Equal and of one kind (True is not 1, 1 is not 1.0), whichever loader made them."""
    return a == b and _kind(a) is _kind(b)


@dataclass(frozen=True)
class Scalar:
    """Where the value of `key` is written: `line` (0-based), the token's `start` and `end`
    columns, its `text`, and the `value` the round-trip loader read there."""

    key: str
    line: int
    start: int
    end: int
    text: str
    value: Any

    def written_as_loaded(self) -> bool:
        """Whether the token alone loads as the value (not a tag, an anchor or a block scalar)."""
        try:
            token = yaml.safe_load(self.text)
        except Exception:
            return False
        return same_value(token, self.value)

    def expected(self) -> str:
        if isinstance(self.value, int) and not isinstance(self.value, bool):
            return f"the literal integer {self.value}"
        return f"the literal {self.value!r}"


def _load_round_trip(text: str, name: str) -> Any:
    try:
        return ruamel.yaml.YAML().load(text)
    except ruamel.yaml.YAMLError as err:
        raise InputError(f"{name}: not valid YAML: {err}") from None


def _parent(doc: Any, key: str, name: str) -> Any:
    """The mapping that holds the last part of dotted `key`."""
    node = doc
    parts = key.split(".")
    for depth, part in enumerate(parts[:-1]):
        node = node.get(part) if isinstance(node, dict) else None
        if node is None:
            raise InputError(f"{name}: no key {'.'.join(parts[:depth + 1])} (needed for {key})")
    return node


def locate(text: str, keys: Iterable[str], name: str = "params.yaml",
           optional: Callable[[str], bool] = _required) -> dict[str, Scalar]:
    """Where in `text` the value of each dotted key is written. A key absent from `text` is an
    error naming the file and the key, unless `optional(key)` (its mapping present, the key
    left out), when it is left out of the answer; a mapping or a list is an error too."""
    doc = _load_round_trip(text, name)
    lines = text.splitlines(keepends=True)
    found = {}
    for key in keys:
        node = _parent(doc, key, name)
        leaf = key.rsplit(".", 1)[-1]
        if not isinstance(node, dict) or leaf not in node:
            if isinstance(node, dict) and optional(key):
                continue
            raise InputError(f"{name}: no key {key}")
        value = node[leaf]
        line, column = node.lc.value(leaf)
        if isinstance(value, (dict, list)):
            raise InputError(f"{name}, line {line + 1}: {key}: expected a single value, got a {type(value).__name__}")
        token = _SCALAR.match(lines[line], column)
        if token is None:
            raise InputError(f"{name}, line {line + 1}: {key}: no plain value at column {column + 1}")
        found[key] = Scalar(key, line, token.start(), token.end(), token.group(), value)
    return found


def check_literals(scalars: Iterable[Scalar], name: str = "params.yaml") -> None:
    """Each token is its value as written (`7`, `'auto'`), not something else the loader resolved."""
    for s in scalars:
        if not s.written_as_loaded():
            raise InputError(f"{name}, line {s.line + 1}: {s.key}: expected {s.expected()} at column {s.start + 1}")


def literal(value: Any) -> str:
    """`value` as a YAML scalar: plain when it loads back as itself, else double-quoted."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    plain = str(value)
    try:
        loaded = yaml.safe_load(plain)
    except Exception:
        loaded = None
    if isinstance(value, str) and (loaded != value or type(loaded) is not str or "\n" in plain):
        return json.dumps(value)  # a double-quoted YAML scalar
    return plain


def splice(text: str, scalars: Mapping[str, Scalar], values: Mapping[str, Any], name: str = "params.yaml") -> str:
    """`text` with the token of each key of `scalars` replaced by its value in `values`; checked
    to load with exactly those values."""
    check_literals(scalars.values(), name)
    lines = text.splitlines(keepends=True)
    for s in sorted(scalars.values(), key=lambda s: (s.line, s.start), reverse=True):
        lines[s.line] = f"{lines[s.line][:s.start]}{literal(values[s.key])}{lines[s.line][s.end:]}"
    new_text = "".join(lines)
    try:
        loaded = yaml.safe_load(new_text)
    except yaml.YAMLError as err:
        raise InputError(f"{name}: rewriting {', '.join(scalars)} gave text that is not valid YAML: {err}") from None
    for key in scalars:
        node = loaded
        for part in key.split("."):
            node = node[part]
        value = values[key]
        if not same_value(node, value):
            raise InputError(f"{name}: {key}: rewriting it gave {node!r}, not {value!r}")
    return new_text


def set_values(text: str, values: Mapping[str, Any], name: str = "params.yaml",
               optional: Callable[[str], bool] = _required) -> str:
    """`text` with the scalar at each dotted key of `values` rewritten; every other byte stays
    (comments, layout, anchors). A key absent from `text` is an error unless `optional(key)`,
    when it is left out."""
    return splice(text, locate(text, values, name, optional), values, name)


def edit_file(path: Path, values: Mapping[str, Any], optional: Callable[[str], bool] = _required) -> bool:
    """set_values on the file `path`, written (atomically) only when it changed; whether it did."""
    text = read_text(path)
    new_text = set_values(text, values, str(path), optional)
    if new_text != text:
        write_text(path, new_text)
    return new_text != text
