"""The report names every training setting of a profile that departs from the paper's."""

from pipeline.config import load_params
from pipeline.report.departures import departures
from pipeline.report.paper import Provenance, build_markdown
from pipeline.report.results import compute_results
from tests.conftest import REPO_ROOT


def _with_shared(params, **update):
    shared = params.train.shared.model_copy(update=update)
    active = params.active.model_copy(update={"train": params.train.model_copy(update={"shared": shared})})
    return params.model_copy(update={"active": active})


def test_the_paper_profile_departs_from_nothing_and_each_change_is_named():
    paper = load_params(REPO_ROOT / "params.yaml", profile="paper")
    assert departures(paper) == []
    beta = departures(_with_shared(paper, opd_beta=1.0))
    assert len(beta) == 1 and beta[0].startswith("OPD beta 1 (paper 0.01)")
    ties = departures(_with_shared(paper, tie_on="outcome"))
    assert len(ties) == 1 and "tie_on `outcome`" in ties[0]


def test_the_tiny_profile_names_its_departures_in_the_report():
    tiny = load_params(REPO_ROOT / "params.yaml", profile="tiny")
    found = departures(tiny)
    assert any(d.startswith("OPD beta") for d in found) == (tiny.train.shared.opd_beta != 0.01)
    assert any("tie_on" in d for d in found) == (tiny.train.shared.tie_on != "reward")
    assert any("dynamic sampling" in d for d in found)  # the Teacher's group filter
    results = compute_results(None, [], [], "multiagent_opd", 4, 10, 0, 0.95)
    prov = Provenance(profile="tiny", git_commit="", data_source="synthetic", split_sizes={}, model={},
                      protocol={}, departures=found)
    md = build_markdown(results, prov)
    assert "## Departures from the paper's constants" in md and all(d in md for d in found)
    assert "Departures" not in build_markdown(results, Provenance(
        profile="paper", git_commit="", data_source="raw", split_sizes={}, model={}, protocol={}))


def test_the_searchers_own_stage1_outcome_is_a_named_departure():
    paper = load_params(REPO_ROOT / "params.yaml", profile="paper")
    teacher = paper.train.systems.c_mas_rl.model_copy(update={"searcher_outcome": "report"})
    systems = paper.train.systems.model_copy(update={"c_mas_rl": teacher})
    active = paper.active.model_copy(update={"train": paper.train.model_copy(update={"systems": systems})})
    found = departures(paper.model_copy(update={"active": active}))
    assert len(found) == 1 and "its own report holds a gold answer" in found[0] and "#teacher-searcher" in found[0]
