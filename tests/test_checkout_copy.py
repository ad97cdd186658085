"""Copies of a checkout (pipeline/checkout_copy.py), shared by draws, the Prefect flow's
workspaces, end-to-end tests and benchmarks: which files a copy holds, the copy, its DVC config
(the checkout's cache and remote) and the environment of its commands."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline.checkout_copy import (
    code_files,
    code_fingerprint,
    copy_checkout,
    default_remote_url,
    dvc_env,
    mirror,
    write_local_config,
)

FILES = {
    "params.yaml": "# the profile\nprofile: tiny  # tiny, ci or paper\n",
    "pipeline/x.py": "x = 1\n",
    ".gitignore": "/data/\n/.maopd/\nignored.txt\n",
    ".dvc/config": "[core]\n    remote = storage\n['remote \"storage\"']\n    url = ../.dvc-storage\n",
    ".dvc/.gitignore": "/config.local\n",
    ".dvc/plots/p.json": "{}\n",
    "dvc.lock": "schema: '2.0'\n",
    "reports/tiny/draws/G.json": "{}\n",
    "reports/ci/draws/C.json": "{}\n",
    "reports/tiny/paper.md": "an output\n",
    "data/big.bin": "data\n",
    "ignored.txt": "ignored\n",
}


@pytest.fixture
def checkout(tmp_path) -> Path:
    root = tmp_path / "checkout"
    for rel, text in FILES.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    subprocess.run(["git", "add", "-A"], cwd=root, check=True)
    (root / "pipeline" / "untracked.py").write_text("y = 2\n")
    return root


def test_a_copy_holds_the_code_and_the_profiles_kept_draws_and_no_state(checkout):
    assert sorted(code_files(checkout, "tiny")) == [".gitignore", "params.yaml", "pipeline/untracked.py",
                                                     "pipeline/x.py", "reports/tiny/draws/G.json"]
    assert "reports/tiny/draws/G.json" not in code_files(checkout)  # no profile: no kept draws
    (checkout / "pipeline" / "x.py").unlink()  # deleted, still in git's index
    assert "pipeline/x.py" not in code_files(checkout, "tiny")


def test_copy_checkout_makes_a_git_repo_with_the_profile_and_dvcs_files(checkout, tmp_path):
    dest = copy_checkout(tmp_path / "copy", "ci", checkout)
    assert (dest / ".git").is_dir() and (dest / "pipeline" / "untracked.py").exists()
    assert (dest / ".dvc" / "config").exists() and (dest / ".dvc" / ".gitignore").exists()
    assert (dest / ".dvc" / "plots" / "p.json").exists()
    assert (dest / "reports" / "ci" / "draws" / "C.json").exists() and not (dest / "reports" / "tiny").exists()
    assert not (dest / "dvc.lock").exists() and not (dest / "data").exists() and not (dest / "ignored.txt").exists()
    assert (dest / "params.yaml").read_text() == "# the profile\nprofile: ci  # tiny, ci or paper\n"


def test_mirror_refreshes_code_and_keeps_the_copys_state(checkout, tmp_path):
    dest = tmp_path / "copy"
    mirror(checkout, dest, "tiny")
    (dest / "dvc.lock").write_text("the copy's\n")
    (dest / "reports" / "tiny" / "paper.md").write_text("the copy's output\n")
    (checkout / "pipeline" / "untracked.py").unlink()
    (checkout / "pipeline" / "x.py").write_text("x = 22\n")
    mirror(checkout, dest, "tiny")
    assert not (dest / "pipeline" / "untracked.py").exists() and (dest / "pipeline" / "x.py").read_text() == "x = 22\n"
    assert (dest / "dvc.lock").read_text() == "the copy's\n"
    assert (dest / "reports" / "tiny" / "paper.md").read_text() == "the copy's output\n"


def test_the_fingerprint_follows_the_code_only(checkout):
    first = code_fingerprint(checkout)
    assert len(first) == 12 and code_fingerprint(checkout) == first
    (checkout / "reports" / "tiny" / "draws" / "H.json").write_text("{}\n")  # the report's input, not code
    (checkout / "data" / "more.bin").write_text("more\n")
    (checkout / "dvc.lock").write_text("changed\n")
    assert code_fingerprint(checkout) == first
    (checkout / "pipeline" / "x.py").write_text("x = 2\n")
    assert code_fingerprint(checkout) != first
    (checkout / "pipeline" / "x.py").write_text("x = 1\n")
    assert code_fingerprint(checkout) == first
    (checkout / "pipeline" / "y.py").write_text("")  # a new file, even an empty one
    assert code_fingerprint(checkout) != first


def test_a_copys_local_config_shares_the_cache_and_the_remote(checkout, tmp_path):
    dest = copy_checkout(tmp_path / "copy", "tiny", checkout)
    assert default_remote_url(dest) == str(dest.resolve() / ".dvc-storage")  # the copied config alone: inside the copy
    write_local_config(dest, checkout)
    local = (dest / ".dvc" / "config.local").read_text()
    assert f"dir = {checkout.resolve() / '.dvc' / 'cache'}" in local and "no_scm" not in local
    assert default_remote_url(dest) == str(checkout.resolve() / ".dvc-storage")
    write_local_config(dest, checkout, share_cache=False, no_scm=True)
    local = (dest / ".dvc" / "config.local").read_text()
    assert "[cache]" not in local and "no_scm = true" in local
    (checkout / ".dvc" / "config").write_text("[core]\n    analytics = false\n")  # no default remote
    write_local_config(dest, checkout)
    assert "remote" not in (dest / ".dvc" / "config.local").read_text()


def test_the_environment_of_a_copys_commands(checkout):
    env = dvc_env(checkout, "abc-dirty", base={"PATH": "/usr/bin", "MAOPD_PROFILE": "ci", "MAOPD_STAGE_READS": "/x",
                                               "HF_HUB_OFFLINE": "0"})
    assert env["PATH"] == f"{Path(sys.executable).parent}{os.pathsep}/usr/bin"  # no .venv in the checkout
    assert env["MLFLOW_TRACKING_URI"] == f"sqlite:///{checkout.resolve() / 'mlflow.db'}"
    assert env["MAOPD_GIT_COMMIT"] == "abc-dirty" and "MAOPD_PROFILE" not in env and "MAOPD_STAGE_READS" not in env
    assert env["DVC_NO_ANALYTICS"] == "1" and env["HF_HUB_OFFLINE"] == "0"  # set ones are kept
    assert "TQDM_DISABLE" not in env and dvc_env(checkout, "x", base={}, streamed=True)["TQDM_DISABLE"] == "1"
    venv = checkout / ".venv" / "bin"
    venv.mkdir(parents=True)
    (venv / "python").write_text("")
    assert dvc_env(checkout, "x", base={"PATH": ""})["PATH"].split(os.pathsep)[0] == str(venv.resolve())
