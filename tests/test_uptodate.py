"""`make repro`'s quick answer (pipeline/uptodate.py): current only while nothing DVC checks changed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from pipeline import uptodate

LOCK = """schema: '2.0'
stages:
  splits:
    cmd: python -m pipeline run splits
    deps:
    - path: pipeline/data/splits.py
      hash: md5
      md5: 0123456789abcdef0123456789abcdef
      size: 3
    params:
      params.yaml:
        profile: tiny
    outs:
    - path: data/splits
      hash: md5
      md5: 0123456789abcdef0123456789abcdef.dir
      size: 6
      nfiles: 2
"""


@pytest.fixture
def project(tmp_path: Path) -> Path:
    for rel, text in {"dvc.yaml": "stages: {}\n", "dvc.lock": LOCK, "params.yaml": "profile: tiny\n",
                      "pipeline/data/splits.py": "x=1", "data/splits/train.parquet": "abc",
                      "data/splits/deep/test.parquet": "def"}.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    uptodate.record(tmp_path)
    return tmp_path


def _later(path: Path) -> None:
    """A modification time that differs from the recorded one whatever the clock's resolution."""
    st = path.stat()
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))


def test_current_right_after_recording(project):
    verdict = uptodate.check(project)
    assert verdict.current, verdict.reason


@pytest.mark.parametrize("rel", ["pipeline/data/splits.py", "params.yaml", "dvc.yaml", "dvc.lock",
                                 "data/splits/deep/test.parquet"])
def test_a_touched_file_sends_to_dvc(project, rel):
    _later(project / rel)
    verdict = uptodate.check(project)
    assert not verdict.current and rel in verdict.reason


def test_a_rewritten_file_of_the_same_size_sends_to_dvc(project):
    """Same size, new content: the save gives it a new modification time, as an editor's does."""
    target = project / "pipeline/data/splits.py"
    target.write_text("y=2")
    _later(target)
    assert not uptodate.check(project).current


def test_files_added_to_or_removed_from_an_output_folder_show(project):
    (project / "data/splits/deep/test.parquet").unlink()
    assert not uptodate.check(project).current
    uptodate.record(project)
    (project / "data/splits/new.parquet").write_text("n")
    _later(project / "data/splits")
    verdict = uptodate.check(project)
    assert not verdict.current and "data/splits" in verdict.reason


def test_a_config_file_that_appears_sends_to_dvc(project):
    (project / ".dvc").mkdir(exist_ok=True)
    (project / ".dvc/config.local").write_text("[core]\n")
    verdict = uptodate.check(project)
    assert not verdict.current and ".dvc/config.local" in verdict.reason


@pytest.mark.parametrize("stamp", [None, "", "{not json", '{"format": 1, "files": {}}',
                                   '{"format": 99, "files": {"a": null}}', "[1, 2]"])
def test_no_readable_stamp_means_not_current(project, stamp):
    path = project / uptodate.STAMP
    if stamp is None:
        uptodate.forget(project)
    else:
        path.write_text(stamp)
    verdict = uptodate.check(project)
    assert not verdict.current and "no readable stamp" in verdict.reason


def test_cli_exit_codes(project):
    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "pipeline", "--root", str(project), "up-to-date", *args],
                              capture_output=True, text=True, cwd=Path(__file__).resolve().parents[1])

    current = run()
    assert current.returncode == 0 and "up to date" in current.stdout
    assert run("--forget").returncode == 0
    stale = run()
    assert stale.returncode == 1 and "dvc repro needed" in stale.stdout
    assert run("--record").returncode == 0 and run().returncode == 0
