"""One parser for '"Title"\ntext' corpus lines: the scalar and vectorised forms agree, both
corpus readers use it, and the corpus stage refuses an empty corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.data.loaders import load_corpus_file
from pipeline.errors import InputError

from .conftest import REPO_ROOT


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


ODD_CONTENTS = [
    ('"Absalon"\nbody', ("Absalon", "body")),
    ('""Weird" Al"\ntext "quoted"', ('"Weird" Al', 'text "quoted"')),  # nested quotes kept
    ('"Title"', ("Title", "")),  # no newline: all title
    ("plain line", ("plain line", "")),
    ('  "T"  \r\nx\ny', ("T", "x\ny")),
    ('"\nx', ('"', "x")),  # a lone quote is not a pair
    ('""\nx', ("", "x")),
    ("\ntext only", ("", "text only")),
    ('"A"B"\n', ('A"B', "")),
    ('Unquoted title\nbody', ("Unquoted title", "body")),
]


@pytest.mark.parametrize("contents, expected", ODD_CONTENTS)
def test_split_contents_odd_lines(contents, expected):
    from pipeline.retrieval.contents import split_contents, split_contents_array

    assert split_contents(contents) == expected
    title, text = split_contents_array(pa.array([contents]))
    assert (title[0].as_py(), text[0].as_py()) == expected


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.sampled_from(['"', "\n", "\r", " ", "\t", "a", "é", "\u2028", "\x85"]), max_size=12))
def test_vectorised_split_is_the_same_rule(contents):
    from pipeline.retrieval.contents import split_contents, split_contents_array

    title, text = split_contents_array(pa.array([contents]))
    assert (title[0].as_py(), text[0].as_py()) == split_contents(contents)


def test_both_corpus_readers_agree_on_odd_lines(tmp_path):
    from pipeline.retrieval.index import read_flashrag_corpus

    path = tmp_path / "odd.jsonl"
    path.write_text("".join(json.dumps({"id": str(i), "contents": c}) + "\n"
                            for i, (c, _) in enumerate(ODD_CONTENTS)), encoding="utf-8")
    loaded = load_corpus_file(path)
    table = read_flashrag_corpus(path).to_pandas()
    expected = [e for _, e in ODD_CONTENTS]
    assert list(zip(loaded["title"], loaded["text"])) == expected
    assert list(zip(table["title"], table["text"])) == expected


def test_corpus_stage_refuses_zero_passages(tmp_path, monkeypatch):
    from pipeline.config import load_params
    from pipeline.stages.corpus import run_corpus

    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    params = load_params(REPO_ROOT / "params.yaml", profile="paper")
    _write(tmp_path / "data/raw/qa/nq/test.jsonl", '{"question": "q", "golden_answers": ["a"]}\n')
    (tmp_path / "data/raw/corpus").mkdir(parents=True)
    with pytest.raises(InputError, match=r"corpus: no passages"):
        run_corpus(params, tmp_path)
    assert not (tmp_path / "data/corpus.parquet").exists()
