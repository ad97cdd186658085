"""Seed sets (configs/seed_sets.yaml, scripts/seed_set.py): set A is the committed params, every
other set changes every seed, and switching rewrites only the seed integers of params.yaml."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
import yaml

from pipeline.config import load_params
from pipeline.draws.seed_sets import SEED_SETS_FILE, current_seed_set, load_seed_sets, seed_keys, write_seed_set
from pipeline.errors import InputError

from .conftest import REPO_ROOT

PARAMS = REPO_ROOT / "params.yaml"


@pytest.fixture
def seed_sets():
    return load_seed_sets(REPO_ROOT / SEED_SETS_FILE)


@pytest.fixture
def params_copy(tmp_path):
    copy = tmp_path / "params.yaml"
    copy.write_bytes(PARAMS.read_bytes())
    return copy


def _seed_keys_in(tree, path=()):
    if isinstance(tree, dict):
        for key, value in tree.items():
            yield from _seed_keys_in(value, (*path, str(key)))
    elif path and "seed" in path[-1]:
        yield ".".join(path)


def test_the_committed_params_hold_set_a(seed_sets):
    assert current_seed_set(PARAMS, seed_sets) == "A"


def test_a_seed_set_covers_every_seed_of_its_profile(seed_sets):
    raw = yaml.safe_load(PARAMS.read_text())
    in_params = set(_seed_keys_in(raw[seed_sets.profile], (seed_sets.profile,))) | set(
        _seed_keys_in(raw["common"], ("common",)))
    assert set(seed_sets.values("A")) == in_params


def test_every_other_set_changes_every_seed(seed_sets):
    default = seed_sets.sets["A"]
    for name, seeds in seed_sets.sets.items():
        if name != "A":
            assert all(seeds[field] != default[field] for field in default), name


def test_switching_rewrites_only_the_seed_lines_and_switching_back_restores_the_file(seed_sets, params_copy):
    original = params_copy.read_text().splitlines()
    changes = write_seed_set(params_copy, "G", seed_sets)
    assert len(changes) == sum(len(keys) for keys in seed_keys(seed_sets.profile).values())
    switched = params_copy.read_text().splitlines()
    changed = [(a, b) for a, b in zip(original, switched, strict=True) if a != b]
    assert len(changed) == len(changes)  # one seed a line in params.yaml
    assert all(re.sub(r"\d+", "N", a) == re.sub(r"\d+", "N", b) for a, b in changed)  # only the numbers differ
    params = load_params(params_copy, profile="tiny")
    assert (params.data.world["seed"], params.eval.seed, params.common.eval.bootstrap_seed) == (13, 20261135, 20260918)
    systems = params.train.systems
    assert (systems.c_mas_rl.seed, systems.multiagent_opd.seed, systems.ablation_no_searcher_supervision.seed) == (
        113, 214, 214)
    assert current_seed_set(params_copy, seed_sets) == "G"

    write_seed_set(params_copy, "A", seed_sets)
    assert params_copy.read_bytes() == PARAMS.read_bytes()


def test_an_unknown_set_or_a_malformed_table_names_what_was_expected(seed_sets, params_copy, tmp_path):
    with pytest.raises(InputError, match=r"seed set 'Z': expected one of A, B, C, D, E, F, G"):
        write_seed_set(params_copy, "Z", seed_sets)
    table = tmp_path / "seed_sets.yaml"
    table.write_text("profile: tiny\nsets: {}\n")
    with pytest.raises(InputError, match=r"seed_sets.yaml: expected a mapping .* `sets` \(at least one\)"):
        load_seed_sets(table)
    table.write_text("profile: tiny\nsets:\n  A: {world: 7, data: 1}\n")
    with pytest.raises(InputError, match=r"seed_sets.yaml: sets.A: expected the fields base_model, bootstrap"):
        load_seed_sets(table)
    table.write_text("profile: tiny\nsets:\n  A: {world: 7.5, data: 1, base_model: 1, validate_masks: 1, eval: 1, "
                     "teacher: 1, stage2: 1, bootstrap: 1}\n")
    with pytest.raises(InputError, match=r"sets.A.world: expected an integer, got 7.5"):
        load_seed_sets(table)


def test_a_seed_that_is_not_an_integer_literal_is_refused_and_nothing_is_written(seed_sets, params_copy):
    text = params_copy.read_text().replace("bootstrap_seed: 20260912", "bootstrap_seed: '20260912'")
    params_copy.write_text(text)
    with pytest.raises(InputError, match=r"params.yaml, line \d+: common.eval.bootstrap_seed: expected an integer"):
        write_seed_set(params_copy, "G", seed_sets)
    assert params_copy.read_text() == text
    params_copy.write_text(text.replace("bootstrap_seed: '20260912'", "confidence_seed: 1"))
    with pytest.raises(InputError, match=r"params.yaml: no key common.eval.bootstrap_seed"):
        write_seed_set(params_copy, "G", seed_sets)


def test_the_script_lists_the_sets_and_switches_one(params_copy):
    script = [sys.executable, str(REPO_ROOT / "scripts" / "seed_set.py"), "--params", str(params_copy),
              "--sets", str(REPO_ROOT / SEED_SETS_FILE)]
    listing = subprocess.run(script, capture_output=True, text=True, check=True).stdout
    assert "* A: world 7," in listing and f"{params_copy} holds set A" in listing
    switched = subprocess.run([*script, "F"], capture_output=True, text=True, check=True).stdout
    assert "tiny.data.world.seed: 7 -> 12" in switched and "(12 seeds changed)" in switched
    refused = subprocess.run([*script, "Q"], capture_output=True, text=True)
    assert refused.returncode == 1 and "error: seed set 'Q'" in refused.stderr
