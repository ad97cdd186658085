"""Loaders: every real format in ../shared/data/real (skipped when absent) and bad files."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline.data.loaders import CORPUS_COLUMNS, QA_COLUMNS, load_corpus_file, load_qa_file, load_raw_dir
from pipeline.data.normalize import normalize_question
from pipeline.errors import InputError

REAL = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "real"


def real(rel: str) -> Path:
    path = REAL / rel
    if not path.exists():
        pytest.skip(f"real data not available: {path}")
    return path


def _well_formed(df: pd.DataFrame, dataset: str, split: str) -> None:
    assert list(df.columns) == QA_COLUMNS
    assert (df["dataset"] == dataset).all() and (df["split"] == split).all()
    assert df["id"].is_unique
    assert df["question"].map(lambda q: isinstance(q, str) and q.strip() != "").all()
    assert df["golden_answers"].map(lambda a: isinstance(a, list) and a and all(isinstance(x, str) for x in a)).all()


# ------------------------------------------------------------------ real files, one per format

REAL_QA = [
    ("flashrag/nq_test_sample.jsonl", "nq", "test", 17),
    ("searchr1/nq_test.parquet", "nq", "test", 3610),
    ("qa/bamboogle_test.json", "bamboogle", "test", 125),
    ("qa/bamboogle_test_verl.jsonl", "bamboogle", "test", 125),
    ("qa/nq_test.json", "nq", "test", 3610),
    ("qa/hotpotqa_dev.json", "hotpotqa", "dev", 7405),
    ("qa/2wiki_dev.json", "2wiki", "dev", 12576),
    ("qa/musique_dev.json", "musique", "dev", 2417),
    ("qa/triviaqa_sample3000.jsonl", "triviaqa", "test", 3000),
    ("qa/popqa_test200.parquet", "popqa", "test", 200),
    ("qa/popqa_train_sample.parquet", "popqa", "train", 800),
    ("qa/hotpotqa_train800.parquet", "hotpotqa", "train", 800),
]


@pytest.mark.real_data
@pytest.mark.parametrize("rel,dataset,split,rows", REAL_QA)
def test_real_qa_file_loads(rel, dataset, split, rows):
    df = load_qa_file(real(rel), dataset, split)
    assert len(df) == rows
    _well_formed(df, dataset, split)


@pytest.mark.real_data
def test_flashrag_jsonl_keeps_ids_and_aliases():
    df = load_qa_file(real("flashrag/nq_test_sample.jsonl"), "nq", "test")
    first = df.iloc[0]
    assert first["source_id"] == "test_0" and first["id"] == "nq_test_test_0"
    assert first["golden_answers"] == ["Wilhelm Conrad Röntgen"]
    assert df.iloc[2]["golden_answers"] == ["Olivia", "MFSK"]


@pytest.mark.real_data
def test_searchr1_parquet_matches_plain_json_of_the_same_questions():
    parquet = load_qa_file(real("searchr1/nq_test.parquet"), "nq", "test")
    plain = load_qa_file(real("qa/nq_test.json"), "nq", "test")
    assert parquet["golden_answers"].map(type).eq(list).all()  # numpy arrays became lists
    a = dict(zip(parquet["question"].map(normalize_question), parquet["golden_answers"].map(sorted)))
    b = dict(zip(plain["question"].map(normalize_question), plain["golden_answers"].map(sorted)))
    shared = set(a) & set(b)
    assert len(shared) > 3500
    assert sum(a[k] == b[k] for k in shared) / len(shared) > 0.99


@pytest.mark.real_data
def test_verl_jsonl_and_plain_json_agree():
    verl = load_qa_file(real("qa/bamboogle_test_verl.jsonl"), "bamboogle", "test")
    plain = load_qa_file(real("qa/bamboogle_test.json"), "bamboogle", "test")
    assert verl["question"].tolist() == plain["question"].tolist()
    assert verl["golden_answers"].tolist() == plain["golden_answers"].tolist()
    assert verl["id"].tolist() == [f"bamboogle_test_{i}" for i in range(125)]


@pytest.mark.real_data
def test_triviaqa_context_and_aliases():
    df = load_qa_file(real("qa/triviaqa_sample3000.jsonl"), "triviaqa", "test")
    raw = [json.loads(line) for line in real("qa/triviaqa_sample3000.jsonl").read_text().split("\n") if line]
    assert not df["question"].str.contains("Question:|Answer:").any()
    assert df.iloc[0]["question"] == "Brunswick, Lancastrian and Pearl Pickler are types of which vegetable?"
    for got, rec in zip(df["golden_answers"], raw):
        assert got[0] == rec["answer"] and set(got) == {rec["answer"], *rec["aliases"]}


@pytest.mark.real_data
def test_json_string_reward_model_gives_the_scalar_target():
    path = real("qa/popqa_test200.parquet")
    raw = pd.read_parquet(path)
    df = load_qa_file(path, "popqa", "test")
    targets = raw["reward_model"].map(lambda s: [json.loads(s)["ground_truth"]["target"]])
    assert df["golden_answers"].tolist() == targets.tolist()
    assert df["question"].tolist() == raw["question"].tolist()


@pytest.mark.real_data
def test_flashrag_corpus_round_trips_contents():
    path = real("flashrag/wiki18_sample_corpus.jsonl")
    df = load_corpus_file(path)
    raw = [json.loads(line) for line in path.read_text().split("\n") if line]
    assert list(df.columns) == CORPUS_COLUMNS and len(df) == 1000
    # most rows already read '"Title"\ntext'; a few lack the quotes and get them
    quoted = [r["contents"].startswith('"') for r in raw]
    assert 800 < sum(quoted) < 1000
    for got, title, r, q in zip(df["contents"], df["title"], raw, quoted):
        first_line = r["contents"].split("\n", 1)[0]
        assert got == (r["contents"] if q else f'"{first_line}"' + r["contents"][len(first_line):])
        assert title == first_line.strip('"')
    assert df["id"].tolist() == [r["id"] for r in raw]
    assert df.iloc[0]["title"] == "Evan Morris" and df.iloc[0]["text"].startswith("Evan Morris Evan L. Morris")


@pytest.mark.real_data
def test_title_text_json_corpus():
    df = load_corpus_file(real("corpora/2wiki_paragraphs.json"))
    assert len(df) == 6119 and df["id"].is_unique
    assert df.iloc[0]["title"] == "Teutberga"
    assert df.iloc[0]["contents"] == '"Teutberga"\n' + df.iloc[0]["text"]


@pytest.mark.real_data
def test_load_raw_dir_on_linked_real_files(tmp_path):
    layout = {
        "qa/nq/test.parquet": "searchr1/nq_test.parquet",
        "qa/hotpotqa/train.parquet": "qa/hotpotqa_train800.parquet",
        "qa/hotpotqa/dev.json": "qa/hotpotqa_dev.json",
        "qa/bamboogle/test.jsonl": "qa/bamboogle_test_verl.jsonl",
        "corpus/wiki18.jsonl": "flashrag/wiki18_sample_corpus.jsonl",
        "corpus/2wiki.json": "corpora/2wiki_paragraphs.json",
    }
    for dst, src in layout.items():
        (tmp_path / dst).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / dst).symlink_to(real(src))
    (tmp_path / "qa" / "nq" / "README.md").write_text("ignored")
    questions, passages = load_raw_dir(tmp_path)
    sizes = questions.groupby(["dataset", "split"]).size().to_dict()
    assert sizes == {("nq", "test"): 3610, ("hotpotqa", "train"): 800, ("hotpotqa", "dev"): 7405,
                     ("bamboogle", "test"): 125}
    assert questions["id"].is_unique
    assert len(passages) == 7119 and passages["id"].is_unique


# ------------------------------------------------------------------ small files written here


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_ids_are_deterministic_and_answers_normalised(tmp_path):
    p = _write(tmp_path / "x.jsonl", '{"question": "q one", "answer": "a"}\n\n{"question": "q two", "answer": ["b", "c"]}\n')
    df = load_qa_file(p, "nq", "train")
    assert df["id"].tolist() == ["nq_train_0", "nq_train_1"]
    assert df["golden_answers"].tolist() == [["a"], ["b", "c"]]


def test_malformed_json_line_names_the_line(tmp_path):
    p = _write(tmp_path / "bad.jsonl", '{"question": "a", "golden_answers": ["x"]}\n{"question": "b",\n')
    with pytest.raises(InputError, match=r"bad\.jsonl, line 2: malformed JSON"):
        load_qa_file(p, "nq", "test")


def test_missing_question_and_missing_answers(tmp_path):
    p = _write(tmp_path / "q.json", json.dumps([{"question": "a", "answer": "x"}, {"answer": "y"}]))
    with pytest.raises(InputError, match=r"q\.json, item 2: missing question"):
        load_qa_file(p, "nq", "test")
    p = _write(tmp_path / "a.jsonl", '{"id": "7", "question": "a"}\n')
    with pytest.raises(InputError, match=r"a\.jsonl, line 1: missing answers.*golden_answers"):
        load_qa_file(p, "nq", "test")


@pytest.mark.parametrize("answer,needle", [(3, "got int"), ([["x"]], "element 1 is list"), ({"a": 1}, "got dict"),
                                           (["ok", 2.5], "element 2 is float")])
def test_answer_that_is_not_strings_is_rejected(tmp_path, answer, needle):
    p = _write(tmp_path / "a.json", json.dumps([{"question": "fine", "answer": "ok"}, {"question": "q", "answer": answer}]))
    with pytest.raises(InputError, match=rf"a\.json, item 2: field 'answer' must be a string or a list of strings.*{needle}"):
        load_qa_file(p, "nq", "test")


def test_bad_parquet_fields_name_the_row(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"question": ["a", "b"], "reward_model": ['{"ground_truth": {"target": "x"}}', "{not json"]}).to_parquet(path)
    with pytest.raises(InputError, match=r"p\.parquet, row 2: field 'reward_model' is a string but not valid JSON"):
        load_qa_file(path, "popqa", "test")
    pd.DataFrame({"question": ["a"], "golden_answers": [[1, 2]]}).to_parquet(path)
    with pytest.raises(InputError, match=r"row 1: field 'golden_answers'.*element 1 is int"):
        load_qa_file(path, "nq", "test")


def test_unreadable_files(tmp_path):
    with pytest.raises(InputError, match="cannot read as parquet"):
        load_qa_file(_write(tmp_path / "junk.parquet", "not parquet"), "nq", "test")
    bad = tmp_path / "latin.jsonl"
    bad.write_bytes(b'{"question": "caf\xe9", "answer": "x"}\n')
    with pytest.raises(InputError, match="not UTF-8"):
        load_qa_file(bad, "nq", "test")
    with pytest.raises(InputError, match="no such file"):
        load_qa_file(tmp_path / "absent.json", "nq", "test")
    with pytest.raises(InputError, match="unsupported file type '.csv'"):
        load_qa_file(_write(tmp_path / "x.csv", "q,a"), "nq", "test")
    with pytest.raises(InputError, match="expected a JSON list"):
        load_qa_file(_write(tmp_path / "d.json", '{"question": "a"}'), "nq", "test")


def test_repeated_ids_and_bad_trivia_context(tmp_path):
    p = _write(tmp_path / "r.jsonl", '{"id": 1, "question": "a", "answer": "x"}\n{"id": 1, "question": "b", "answer": "y"}\n')
    with pytest.raises(InputError, match=r"line 2: id 'nq_test_1' repeats .*line 1"):
        load_qa_file(p, "nq", "test")
    p = _write(tmp_path / "t.jsonl", '{"context": "What is it?", "answer": "x", "aliases": []}\n')
    with pytest.raises(InputError, match="'context' must look like"):
        load_qa_file(p, "triviaqa", "test")


def test_corpus_errors_name_line_and_field(tmp_path):
    p = _write(tmp_path / "c.jsonl", '{"id": "0", "contents": "\\"T\\"\\nbody"}\n{"id": "1", "contents": 5}\n')
    with pytest.raises(InputError, match=r"c\.jsonl, line 2: field 'contents' must be a string"):
        load_corpus_file(p)
    p = _write(tmp_path / "d.json", json.dumps([{"title": "T", "body": "x"}]))
    with pytest.raises(InputError, match="need 'contents' or both 'title' and 'text'"):
        load_corpus_file(p)
    p = _write(tmp_path / "e.jsonl", '{"id": "0", "contents": "\\"T\\"\\nbody"}\n{"id": "0", "contents": "\\"U\\"\\nx"}\n')
    with pytest.raises(InputError, match="passage id '0' repeats"):
        load_corpus_file(p)


def test_load_raw_dir_layout_and_errors(tmp_path):
    with pytest.raises(InputError, match="raw data folder not found"):
        load_raw_dir(tmp_path / "nope")
    (tmp_path / "qa").mkdir()
    with pytest.raises(InputError, match="no QA files found"):
        load_raw_dir(tmp_path)
    (tmp_path / "qa" / "nq").mkdir()
    _write(tmp_path / "qa" / "nq" / "train.jsonl", '{"id": "0", "question": "a", "golden_answers": ["x"]}\n')
    _write(tmp_path / "qa" / "nq" / "test.json", json.dumps([{"id": "0", "question": "b", "answer": "y"}]))
    questions, passages = load_raw_dir(tmp_path)
    assert questions["id"].tolist() == ["nq_test_0", "nq_train_0"]
    assert list(passages.columns) == CORPUS_COLUMNS and passages.empty
    (tmp_path / "corpus").mkdir()
    _write(tmp_path / "corpus" / "a.jsonl", '{"id": "5", "contents": "\\"T\\"\\nbody"}\n')
    _write(tmp_path / "corpus" / "b.jsonl", '{"id": "5", "contents": "\\"U\\"\\nbody"}\n')
    with pytest.raises(InputError, match="passage id '5' appears in more than one corpus file"):
        load_raw_dir(tmp_path)
    _write(tmp_path / "qa" / "nq" / "test.jsonl", '{"question": "c", "answer": "z"}\n')
    with pytest.raises(InputError, match="nq/test is also given by"):
        load_raw_dir(tmp_path)
