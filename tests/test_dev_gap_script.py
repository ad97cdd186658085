"""scripts/dev_gap.py: its arguments are checked before anything is loaded."""

import importlib.util
from pathlib import Path

import pytest

from pipeline.errors import InputError

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "dev_gap.py"


def _load():
    spec = importlib.util.spec_from_file_location("dev_gap_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_arguments_are_label_model_pairs_and_a_reference_is_needed(tmp_path):
    dev_gap = _load()
    out, models, workflow, heldout = dev_gap._parse(["out", "base=data/models/base", "t32=x/teacher"])
    assert out == Path("out")
    assert models == [("base", Path("data/models/base"), False), ("t32", Path("x/teacher"), False)]
    _, models, _, _ = dev_gap._parse(["out", "ref=reference:data/models/base", "engine=data/models/base"])
    assert models == [("ref", Path("data/models/base"), True), ("engine", Path("data/models/base"), False)]
    assert (workflow, heldout) == ("cascade", 0)
    with pytest.raises(InputError, match="'oops': expected label=model_dir"):
        dev_gap._parse(["out", "base=a", "oops"])
    with pytest.raises(InputError, match="usage"):
        dev_gap._parse([])
    with pytest.raises(InputError, match="at least two"):
        dev_gap.main(tmp_path, [("base", tmp_path, False)])
    with pytest.raises(InputError, match="model folder missing"):
        dev_gap.main(tmp_path, [("base", tmp_path / "none", False), ("t", tmp_path / "none", True)])


def test_the_workflow_is_chosen_by_a_flag():
    dev_gap = _load()
    out, models, workflow, _ = dev_gap._parse(["--workflow", "hierarchy", "out", "base=a", "opd=b"])
    assert (out, workflow, [label for label, _, _ in models]) == (Path("out"), "hierarchy", ["base", "opd"])
    with pytest.raises(InputError, match="--workflow: expected one of cascade, hierarchy"):
        dev_gap._parse(["--workflow", "star", "out", "base=a", "opd=b"])
    with pytest.raises(InputError, match="--workflow"):
        dev_gap._parse(["--workflow"])


def test_held_out_questions_are_asked_for_by_a_count():
    dev_gap = _load()
    out, _, workflow, heldout = dev_gap._parse(["--heldout", "2000", "--workflow", "hierarchy", "out", "a=x", "b=y"])
    assert (out, workflow, heldout) == (Path("out"), "hierarchy", 2000)
    for bad in (["--heldout", "0"], ["--heldout", "many"], ["--heldout"]):
        with pytest.raises(InputError, match="--heldout: expected a positive number of questions"):
            dev_gap._parse([*bad, "out", "a=x", "b=y"])
