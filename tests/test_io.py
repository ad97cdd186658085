"""pipeline.io: outputs get the permissions of the umask, a cut swap leaves nothing behind,
and an unreadable parquet input is an `error:` line (exit 2) naming the file."""

from __future__ import annotations

import os
import stat

import pandas as pd
import pytest

from pipeline.cli import main
from pipeline.errors import InputError
from pipeline.io import atomic_dir, read_parquet, write_json, write_parquet, write_text


@pytest.fixture
def umask():
    """Set the process umask for the test, restored after it."""
    previous = os.umask(0o022)
    yield lambda mask: os.umask(mask)
    os.umask(previous)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask,file_mode,dir_mode", [(0o022, 0o644, 0o755), (0o002, 0o664, 0o775),
                                                     (0o077, 0o600, 0o700)])
def test_outputs_respect_the_umask(tmp_path, umask, mask, file_mode, dir_mode):
    umask(mask)
    write_json(tmp_path / "a.json", {"x": 1})
    write_text(tmp_path / "b.txt", "x")
    write_parquet(tmp_path / "c.parquet", pd.DataFrame({"x": [1]}))
    with atomic_dir(tmp_path / "folder") as tmp:
        (tmp / "inside.txt").write_text("x")
    assert [_mode(tmp_path / name) for name in ("a.json", "b.txt", "c.parquet")] == [file_mode] * 3
    assert _mode(tmp_path / "folder") == dir_mode and _mode(tmp_path / "folder" / "inside.txt") == file_mode


def test_a_cut_swap_is_cleaned_by_the_next_write(tmp_path):
    models = tmp_path / "models"
    models.mkdir()
    # killed between the two renames: the old folder aside, the new one not yet in place
    (models / ".teacher.old").mkdir()
    (models / ".teacher.old" / "config.json").write_text("old")
    (models / ".teacher.ab12cd34.tmp").mkdir()
    (models / ".report.json.x9y8z7w6.tmp").write_text("half")  # a cut file write
    with atomic_dir(models / "teacher") as tmp:
        (tmp / "config.json").write_text("new")
    write_json(models / "report.json", {})
    assert sorted(p.name for p in models.iterdir()) == ["report.json", "teacher"]
    assert (models / "teacher" / "config.json").read_text() == "new"


def test_a_swap_cut_before_the_new_folder_arrived_restores_the_old_one(tmp_path):
    from pipeline.io import recover_interrupted

    (tmp_path / ".teacher.old").mkdir()
    (tmp_path / ".teacher.old" / "config.json").write_text("old")
    recover_interrupted(tmp_path / "teacher")
    assert (tmp_path / "teacher" / "config.json").read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["teacher"]


BAD_PARQUET = {"empty": b"", "random bytes": os.urandom(4096), "truncated": None}


def _bad(path, kind: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    if kind == "truncated":
        pd.DataFrame({"id": range(500), "question": ["q"] * 500}).to_parquet(path)
        path.write_bytes(path.read_bytes()[:-200])
    else:
        path.write_bytes(BAD_PARQUET[kind])


@pytest.mark.parametrize("kind", sorted(BAD_PARQUET))
def test_read_parquet_names_the_file_and_what_makes_it(tmp_path, kind):
    _bad(tmp_path / "x.parquet", kind)
    with pytest.raises(InputError, match=r"x\.parquet: not a readable parquet file .*the `splits` stage"):
        read_parquet(tmp_path / "x.parquet", "the `splits` stage")


@pytest.mark.parametrize("kind", sorted(BAD_PARQUET))
def test_an_unreadable_split_is_an_error_line_with_exit_2(tmp_path, monkeypatch, capsys, repo_root, kind):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    split = tmp_path / "data" / "splits" / "dev.parquet"
    _bad(split, kind)
    for name in ("train", "test"):
        pd.DataFrame({"id": ["a"], "question": ["q"]}).to_parquet(tmp_path / "data" / "splits" / f"{name}.parquet")
    code = main(["--params", str(repo_root / "params.yaml"), "--profile", "ci", "--root", str(tmp_path),
                 "run", "validate_splits"])
    err = capsys.readouterr().err
    assert code == 2
    assert f"\nerror: {split}: not a readable parquet file" in "\n" + err and "Traceback" not in err


def test_unreadable_corpus_and_records_are_input_errors(tmp_path, monkeypatch, repo_root):
    from pipeline.config import load_params
    from pipeline.report.inputs import load_records, split_sizes
    from pipeline.stages import STAGES

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path / 'mlflow.db'}")
    _bad(tmp_path / "data" / "corpus" / "passages.parquet", "truncated")
    with pytest.raises(InputError, match=r"passages\.parquet: not a readable parquet file.*`corpus` stage"):
        STAGES["index"](load_params(repo_root / "params.yaml", profile="ci"), tmp_path)
    _bad(tmp_path / "data" / "eval" / "multiagent_opd" / "records.parquet", "random bytes")
    with pytest.raises(InputError, match=r"multiagent_opd/records\.parquet: not a readable parquet file.*"
                       r"evaluate@multiagent_opd"):
        load_records(tmp_path)
    _bad(tmp_path / "data" / "splits" / "test.parquet", "empty")
    with pytest.raises(InputError, match=r"test\.parquet: not a readable parquet file"):
        split_sizes(tmp_path)
