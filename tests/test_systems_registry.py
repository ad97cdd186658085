"""pipeline.systems is the one table of systems: params.yaml, dvc.yaml and the verl configs name
exactly its systems, by its names."""

from __future__ import annotations

import yaml

from pipeline.config import TrainSystems
from pipeline.systems import BY_NAME, SYSTEMS, TRAINED, system, trained_system
from tests.conftest import REPO_ROOT


def test_params_train_one_entry_per_trained_system():
    trained = {s.name for s in TRAINED}
    assert set(TrainSystems.model_fields) == trained
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    for profile in ("tiny", "ci", "paper"):
        assert set(raw[profile]["train"]["systems"]) == trained, profile


def test_dvc_yaml_trains_and_evaluates_the_registry():
    stages = yaml.safe_load((REPO_ROOT / "dvc.yaml").read_text())["stages"]
    assert list(stages["train"]["foreach"]) == [s.name for s in TRAINED]
    assert list(stages["evaluate"]["foreach"]) == [s.name for s in SYSTEMS]
    assert {k: v["weights"] for k, v in stages["evaluate"]["foreach"].items()} == {s.name: s.weights for s in SYSTEMS}


def test_one_verl_config_per_trained_system():
    files = {p.stem for p in (REPO_ROOT / "configs" / "verl").glob("*.yaml")} - {"maopd_base"}
    assert files == {s.name for s in TRAINED}


def test_names_and_stages_derive_from_the_one_name():
    opd = BY_NAME["multiagent_opd"]
    assert (opd.train_stage, opd.eval_stage, opd.weights) == ("train@multiagent_opd", "evaluate@multiagent_opd",
                                                              "multiagent_opd")
    base = system("h_mas_base")
    assert (base.trained, base.train_stage, base.weights, base.trained_roles) == (False, None, "base", ())
    assert trained_system("c_mas_rl").training.teacher is None  # Stage I trains without a Teacher
    assert {s.training.teacher for s in TRAINED if s.workflow == "hierarchy"} == {"c_mas_rl", "base"}


def test_every_system_has_its_own_fixed_colour():
    import re

    from pipeline.systems import COLOURS, RUN_COLOUR_TAG

    assert set(COLOURS) == {s.name for s in SYSTEMS}
    assert all(re.fullmatch(r"#[0-9a-f]{6}", c) for c in COLOURS.values()), COLOURS
    assert len(set(COLOURS.values())) == len(SYSTEMS)  # no two systems share a colour
    # the pairs the paper compares, and the pair that used to share one
    assert COLOURS["multiagent_opd"] != COLOURS["prompted_critic"]
    assert COLOURS["multiagent_opd"] != COLOURS["ablation_outcome_rl_searcher"]
    opd = BY_NAME["multiagent_opd"]
    assert opd.run_tags == {"system": "multiagent_opd", RUN_COLOUR_TAG: opd.colour}


def test_the_dvc_plots_templates_colour_each_system_as_the_registry_does():
    """The committed templates are what the registry gives (`python -m pipeline dvc-yaml`): each
    colours the field `system` with a scale of fixed domain (the names) and range (the colours)."""
    import json

    from pipeline.report.dvc_templates import template_files

    for path, text in template_files(REPO_ROOT).items():
        assert path.read_text() == text, f"{path.name} is stale: run `python -m pipeline dvc-yaml`"
        spec = json.loads(text)
        colour = (spec.get("spec") or spec)["encoding"]["color"]
        assert colour["field"] == "system"
        assert colour["scale"] == {"domain": [s.name for s in SYSTEMS], "range": [s.colour for s in SYSTEMS]}
