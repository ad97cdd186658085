"""Loaders: every real format in ../shared/data/real (skipped when absent) and bad files."""

from __future__ import annotations

import json
import logging
from pathlib import Path

import pandas as pd
import pytest

from pipeline.data.loaders import CORPUS_COLUMNS, QA_COLUMNS, load_corpus_file, load_qa_file, load_raw_dir
from pipeline.data.normalize import normalize_question
from pipeline.errors import InputError
from pipeline.eval.em import exact_match

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


@pytest.mark.real_data
@pytest.mark.parametrize("suffix", [".parquet", ".jsonl"])
def test_real_nq_as_verl_rows_with_a_joined_ground_truth_keeps_every_alias(tmp_path, suffix):
    # the verl parquet layout: reward_model.ground_truth = ", ".join(answers), the list in extra_info.answer
    source = json.loads(real("qa/nq_test.json").read_text(encoding="utf-8"))
    rows = [verl_row(r["question"], r["answer"], i, joined=True) for i, r in enumerate(source)]
    df = load_qa_file(write_rows(tmp_path / f"nq{suffix}", rows), "nq", "test")
    truth = [r["answer"] for r in source]
    assert len(df) == 3610 and df["golden_answers"].tolist() == truth
    assert sum(len(t) > 1 for t in truth) == 1534  # the rows a joined string would have merged
    assert all(exact_match(t[0], g) for t, g in zip(truth, df["golden_answers"]))  # a right answer scores 1
    assert df["source_id"].tolist() == [str(i) for i in range(3610)]


@pytest.mark.real_data
def test_ids_come_from_extra_info_index_when_the_file_has_no_id():
    raw = pd.read_parquet(real("qa/popqa_train_sample.parquet"))
    df = load_qa_file(real("qa/popqa_train_sample.parquet"), "popqa", "train")
    assert df["source_id"].tolist() == [str(int(e["index"])) for e in raw["extra_info"]]
    verl = load_qa_file(real("qa/bamboogle_test_verl.jsonl"), "bamboogle", "test")
    assert verl["source_id"].tolist() == [str(i) for i in range(125)]


# ------------------------------------------------------------------ small files written here


def _write(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8")
    return path


def test_missing_ids_are_deterministic_and_answers_normalised(tmp_path):
    p = _write(tmp_path / "x.jsonl",
               '{"question": "q one", "answer": "a"}\n\n{"question": "q two", "answer": ["b", "c"]}\n')
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
    p = _write(tmp_path / "a.json",
               json.dumps([{"question": "fine", "answer": "ok"}, {"question": "q", "answer": answer}]))
    with pytest.raises(InputError,
                       match=rf"a\.json, item 2: field 'answer' must be a string or a list of strings.*{needle}"):
        load_qa_file(p, "nq", "test")


def test_bad_parquet_fields_name_the_row(tmp_path):
    path = tmp_path / "p.parquet"
    pd.DataFrame({"question": ["a", "b"],
                  "reward_model": ['{"ground_truth": {"target": "x"}}', "{not json"]}).to_parquet(path)
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
    p = _write(tmp_path / "r.jsonl",
               '{"id": 1, "question": "a", "answer": "x"}\n{"id": 1, "question": "b", "answer": "y"}\n')
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
    p = _write(tmp_path / "e.jsonl",
               '{"id": "0", "contents": "\\"T\\"\\nbody"}\n{"id": "0", "contents": "\\"U\\"\\nx"}\n')
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


# ------------------------------------------------------------------ one built file per layout


def write_rows(path: Path, rows: list[dict]) -> Path:
    if path.suffix == ".parquet":
        pd.DataFrame(rows).to_parquet(path)
    elif path.suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    else:
        path.write_text(json.dumps(rows), encoding="utf-8")
    return path


def verl_row(question: str, answers: list[str], index: int, joined: bool) -> dict:
    """A verl row; joined: ground_truth is ", ".join(answers) and the list sits in extra_info.answer."""
    return {"data_source": "nq", "prompt": [{"role": "user", "content": f"Answer it. Question: {question}"}],
            "ability": "fact-reasoning",
            "reward_model": {"ground_truth": ", ".join(answers) if joined else answers[0], "style": "rule"},
            "extra_info": {"answer": answers if joined else answers[0], "index": index, "split": "test"}}


ALIASES = [["14 December 1972 UTC", "December 1972"], ["Paris"], ["A+", "AB+"]]
QUESTIONS = ["when was the last moon walk", "capital of france", "most common blood type in sweden"]


@pytest.mark.parametrize("suffix", [".parquet", ".jsonl", ".json"])
def test_verl_joined_ground_truth_gives_the_alias_list_of_extra_info(tmp_path, suffix, caplog):
    rows = [verl_row(q, a, 10 + i, joined=True) for i, (q, a) in enumerate(zip(QUESTIONS, ALIASES))]
    with caplog.at_level(logging.INFO, logger="pipeline.data.loaders"):
        df = load_qa_file(write_rows(tmp_path / f"v{suffix}", rows), "nq", "test")
    assert "2 of 3 records carry an answer string beside an alias list" in caplog.text
    assert df["golden_answers"].tolist() == ALIASES  # never ['14 December 1972 UTC, December 1972']
    assert df["question"].tolist() == QUESTIONS
    assert df["id"].tolist() == ["nq_test_10", "nq_test_11", "nq_test_12"]


def test_verl_with_json_string_columns_and_a_joined_ground_truth(tmp_path):
    rows = [{"prompt": [{"role": "user", "content": q}],
             "reward_model": json.dumps({"ground_truth": {"target": ", ".join(a)}}),
             "extra_info": json.dumps({"answers": a, "idx": f"q{i}"})}
            for i, (q, a) in enumerate(zip(QUESTIONS, ALIASES))]
    df = load_qa_file(write_rows(tmp_path / "s.parquet", rows), "nq", "test")
    assert df["golden_answers"].tolist() == ALIASES and df["source_id"].tolist() == ["q0", "q1", "q2"]


def test_a_joined_string_is_used_when_it_is_all_the_record_has(tmp_path):
    rows = [{"question": "q", "reward_model": {"ground_truth": "Paris, France"},
             "extra_info": {"answer": "Paris, France"}}]
    assert load_qa_file(write_rows(tmp_path / "a.jsonl", rows), "nq", "test")["golden_answers"][0] == ["Paris, France"]


def test_verl_plain_string_ground_truth(tmp_path):
    rows = [verl_row("who was president", ["james madison"], 0, joined=False) | {"extra_info": {"index": 4}}]
    df = load_qa_file(write_rows(tmp_path / "b.jsonl", rows), "bamboogle", "test")
    assert df.iloc[0].tolist() == ["bamboogle", "test", "bamboogle_test_4", "who was president", ["james madison"], "4"]


def test_flashrag_jsonl_and_search_r1_parquet(tmp_path):
    flashrag = [{"id": f"test_{i}", "question": q, "golden_answers": a}
                for i, (q, a) in enumerate(zip(QUESTIONS, ALIASES))]
    df = load_qa_file(write_rows(tmp_path / "f.jsonl", flashrag), "nq", "test")
    assert df["golden_answers"].tolist() == ALIASES and df["id"].tolist()[0] == "nq_test_test_0"
    searchr1 = [r | {"data_source": "nq",
                     "reward_model": {"ground_truth": {"target": r["golden_answers"]}, "style": "rule"},
                     "extra_info": {"index": i, "split": "test"}} for i, r in enumerate(flashrag)]
    df = load_qa_file(write_rows(tmp_path / "s.parquet", searchr1), "nq", "test")
    assert df["golden_answers"].tolist() == ALIASES and df["source_id"].tolist() == ["test_0", "test_1", "test_2"]


def test_alias_lists_in_several_places_are_merged_without_repeats(tmp_path):
    rows = [{"question": "q", "golden_answers": ["Paris"], "answer": "Paris, Ile-de-France",
             "reward_model": {"ground_truth": {"target": ["Paris", "City of Light"]}},
             "extra_info": {"answer": ["paris"]}}]
    df = load_qa_file(write_rows(tmp_path / "m.parquet", rows), "nq", "test")
    assert df["golden_answers"][0] == ["Paris", "City of Light", "paris"]


def test_plain_json_list_and_reward_model_json_string(tmp_path):
    plain = [{"question": "a", "answer": "x"}, {"question": "b", "answer": ["y", "z"]}]
    assert (load_qa_file(write_rows(tmp_path / "p.json", plain), "nq", "dev")["golden_answers"].tolist()
            == [["x"], ["y", "z"]])
    popqa = [{"question": "q", "answer": "actor", "reward_model": '{"ground_truth": {"target": "actor"}}',
              "extra_info": {"index": 3.0, "split": "test"}}]
    df = load_qa_file(write_rows(tmp_path / "p.parquet", popqa), "popqa", "test")
    assert df["golden_answers"][0] == ["actor"] and df["id"][0] == "popqa_test_3"


def test_triviaqa_llm_foundry_layout(tmp_path):
    rows = [{"context": "Question: Which vegetable?\nAnswer:", "answer": "Onion",
             "aliases": ["Onions", "Onion", "Allium cepa"]}]
    df = load_qa_file(write_rows(tmp_path / "t.jsonl", rows), "triviaqa", "test")
    assert df["question"][0] == "Which vegetable?" and df["golden_answers"][0] == ["Onion", "Onions", "Allium cepa"]


def test_triviaqa_official_data_layout(tmp_path):
    data = {"Data": [
        {"Answer": {"Aliases": ["David Seville", "Ross Bagdasarian"],
                    "NormalizedAliases": ["david seville", "ross bagdasarian"],
                    "NormalizedValue": "david seville", "Type": "WikipediaEntity", "Value": "David Seville"},
         "EntityPages": [], "Question": "Who was the man behind The Chipmunks?", "QuestionId": "tc_2",
         "QuestionSource": "http://www.triviacountry.com/", "SearchResults": []},
        {"Answer": {"Aliases": ["7"], "NormalizedAliases": ["7"], "Value": "7"}, "Question": "How many?",
         "QuestionId": "tc_9"},
    ], "Domain": "Web", "Split": "dev", "VerifiedEval": False, "Version": 1.0}
    path = tmp_path / "triviaqa.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    df = load_qa_file(path, "triviaqa", "dev")
    assert df["id"].tolist() == ["triviaqa_dev_tc_2", "triviaqa_dev_tc_9"]
    assert df["question"][0] == "Who was the man behind The Chipmunks?"
    assert df["golden_answers"].tolist() == [["David Seville", "Ross Bagdasarian", "david seville", "ross bagdasarian"],
                                             ["7"]]
    del data["Data"][1]["Answer"]  # the official test file has no answers
    path.write_text(json.dumps(data), encoding="utf-8")
    with pytest.raises(InputError, match=r"triviaqa\.json, item 2: missing answers"):
        load_qa_file(path, "triviaqa", "test")
    path.write_text(json.dumps({"version": 1, "questions": []}), encoding="utf-8")
    with pytest.raises(InputError, match=r"expected a JSON list of records or TriviaQA's \{\"Data\""
                                         r".*keys \['questions', 'version'\]"):
        load_qa_file(path, "triviaqa", "test")


@pytest.mark.parametrize(("field", "value", "expected"), [
    ("id", "test_7", "test_7"), ("_id", "5a8b57f2", "5a8b57f2"), ("idx", 12, "12"), ("test_id", "t-3", "t-3"),
    ("qid", 4.0, "4"), ("QuestionId", "tc_1", "tc_1"),
])
def test_ids_are_kept_from_the_usual_id_fields(tmp_path, field, value, expected):
    rows = [{field: value, "question": "q", "answer": "a"}]
    assert load_qa_file(write_rows(tmp_path / "i.parquet", rows), "nq", "test")["source_id"][0] == expected


def test_ids_from_extra_info_and_the_top_level_id_first(tmp_path):
    rows = [{"question": "q", "answer": "a", "extra_info": {"index": 2.0}},
            {"id": "own", "question": "r", "answer": "b", "extra_info": {"index": 3}}]
    assert load_qa_file(write_rows(tmp_path / "e.jsonl", rows), "nq", "test")["source_id"].tolist() == ["2", "own"]


LFS_POINTER = ("version https://git-lfs.github.com/spec/v1\n"
               "oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\nsize 617522\n")


@pytest.mark.parametrize("name", ["test.parquet", "test.jsonl", "test.json"])
def test_a_git_lfs_pointer_is_named_as_such(tmp_path, name):
    path = _write(tmp_path / name, LFS_POINTER)
    with pytest.raises(InputError, match=rf"{name}: a Git LFS pointer \(sha256:4d7a2146.*617522 bytes\).*git lfs pull"):
        load_qa_file(path, "nq", "test")


def test_a_git_lfs_pointer_as_corpus_is_named_as_such(tmp_path):
    with pytest.raises(InputError, match="a Git LFS pointer"):
        load_corpus_file(_write(tmp_path / "wiki18.jsonl", LFS_POINTER))
