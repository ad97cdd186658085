"""scripts/gpu_smoke.py runs here on the CPU: the CUDA checks skip cleanly, and the same
comparisons run with the low-precision side on the CPU, with the rest of the stack hidden."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "gpu_smoke.py"
CHECKS = {"backend", "trainer", "e5"}


def run(tmp_path: Path, *args: str) -> tuple[int, dict]:
    out = tmp_path / "results.json"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--cpu-threads", "1", *args],
                          check=False, capture_output=True, text=True, timeout=600)
    assert out.is_file(), proc.stderr[-3000:]
    return proc.returncode, json.loads(out.read_text())


def test_default_run_targets_cuda_and_skips_without_it(tmp_path):
    code, results = run(tmp_path, "--emulate-bare")
    assert code == 0 and results["passed"] and set(results["checks"]) == CHECKS
    assert results["device"]["requested"] == "cuda" and results["scale"] == "base"
    for check in results["checks"].values():
        if torch.cuda.is_available():
            assert check["status"] == "pass", check
        else:
            assert check == {"status": "skipped", "reason": "CUDA is not available to torch"}
    assert results["all_skipped"] is (not torch.cuda.is_available())
    assert results["seconds_total"] > 0 and results["peak_rss_mb"] > 0


def test_cpu_dry_run_with_only_torch_transformers_and_numpy(tmp_path):
    code, results = run(tmp_path, "--device", "cpu", "--emulate-bare")
    checks = results["checks"]
    assert code == 0 and results["passed"], json.dumps(checks, indent=1)[-3000:]
    assert {name: c["status"] for name, c in checks.items()} == dict.fromkeys(CHECKS, "pass")
    assert results["stack"]["logprobs_from_logits"].startswith("stand-in")  # verl was hidden
    backend = checks["backend"]["figures"]
    assert backend["same_greedy_tokens"] == backend["prompts"] == 8 and backend["partings"] == []
    assert backend["min_float32_top1_margin"] > 1.0  # the fitted model's greedy steps are no near-ties
    assert 0 < backend["score_max_abs_logp_diff"] <= checks["backend"]["tolerances"]["score_max_abs_logp_diff"]
    trainer = checks["trainer"]["figures"]
    assert trainer["policy_loss"].startswith("stand-in") and len(trainer["losses"]) == 3
    assert trainer["max_abs_weight_change"] > 0 and trainer["mean_logp_rise_of_positive_advantage_tokens"] > 0
    e5 = checks["e5"]["figures"]
    assert e5["min_cosine"] >= checks["e5"]["tolerances"]["min_cosine"] == 0.999
    assert all(c["seconds"] > 0 and c["peak_rss_mb_so_far"] > 0 for c in checks.values())


def test_with_the_stack_the_trainer_check_uses_the_projects_ppo_loss(tmp_path):
    code, results = run(tmp_path, "--device", "cpu", "--checks", "trainer")
    assert code == 0 and results["checks"]["trainer"]["status"] == "pass"
    assert results["checks"]["trainer"]["figures"]["policy_loss"].startswith("pipeline.rl.loss")
    assert results["stack"]["logprobs_from_logits"] == "verl"


@pytest.fixture
def smoke_module():
    spec = importlib.util.spec_from_file_location("gpu_smoke_under_test", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_crashing_or_failing_check_is_reported_and_the_exit_code_is_1(tmp_path, smoke_module, monkeypatch):
    def crash(ctx):
        raise RuntimeError("CUDA error: an illegal memory access was encountered")

    monkeypatch.setattr(smoke_module, "_install_verl_stand_in", lambda: "untouched")  # no sys.modules edits here
    monkeypatch.setitem(smoke_module.CHECKS, "backend", crash)
    monkeypatch.setitem(smoke_module.CHECKS, "trainer",
                        lambda ctx: {"passed": False, "figures": {"losses": [float("nan")]}})
    out = tmp_path / "r.json"
    assert smoke_module.main(["--out", str(out), "--device", "cpu", "--checks", "backend", "trainer"]) == 1
    results = json.loads(out.read_text())
    assert not results["passed"]
    assert results["checks"]["backend"]["status"] == "fail"
    assert "illegal memory access" in results["checks"]["backend"]["error"]
    assert results["checks"]["trainer"]["status"] == "fail"
