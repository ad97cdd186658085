"""The splits suite passes clean splits and names each planted violation."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pandas as pd
import pytest

from pipeline.data.normalize import normalize_question
from pipeline.errors import InputError
from pipeline.validate.splits import validate_splits

QUOTAS = {"nq": 2, "bamboogle": 1}


def split_frame(split: str, rows: list[tuple[str, str, str, list[str]]]) -> pd.DataFrame:
    return pd.DataFrame(
        [
            {"dataset": d, "split": split, "id": i, "question": q, "golden_answers": a,
             "norm_question": normalize_question(q)}
            for d, i, q, a in rows
        ]
    )


def clean_splits() -> dict[str, pd.DataFrame]:
    return {
        "train": split_frame("train", [("nq", "t1", "Who founded Rome?", ["Romulus"]),
                                       ("hotpotqa", "t2", "Where is Kalo river?", ["Bema", "the Bema"])]),
        "dev": split_frame("dev", [("nq", "d1", "When did Palo fall?", ["1820"])]),
        "test": split_frame("test", [("nq", "s1", "Who wrote Dune?", ["Frank Herbert"]),
                                     ("nq", "s2", "What is the capital of Mira?", ["Tesk"]),
                                     ("bamboogle", "b1", "Which river crosses Tesk?", ["Oro"])]),
    }


def run(tmp_path: Path, splits: dict[str, pd.DataFrame], quotas: dict[str, int] = QUOTAS):
    return validate_splits(splits["train"], splits["dev"], splits["test"], quotas, tmp_path / "data_docs")


def with_row(splits: dict[str, pd.DataFrame], split: str, row: tuple[str, str, str, list[str]]):
    splits[split] = pd.concat([splits[split], split_frame(split, [row])], ignore_index=True)
    return splits


def test_clean_splits_pass_and_write_data_docs(tmp_path):
    outcome = run(tmp_path, clean_splits())
    assert outcome.success, outcome.failures
    assert outcome.failures == []
    index = tmp_path / "data_docs" / "index.html"
    assert index.is_file() and "<html" in index.read_text().lower()
    assert list((tmp_path / "data_docs" / "validations").rglob("*.html"))
    summary = json.loads(json.dumps(outcome.results))
    assert summary["success"] is True
    assert set(summary["tables"]) == {"rows", "question_splits", "test_quotas"}
    assert all(e["success"] for t in summary["tables"].values() for e in t["expectations"])


def test_data_docs_are_byte_identical_from_run_to_run(tmp_path):
    """No clock time or random id in the site: DVC caches it, a checkout elsewhere reuses it."""
    sites = []
    for name in ("first", "second"):
        validate_splits(*(clean_splits()[s] for s in ("train", "dev", "test")), QUOTAS, tmp_path / name)
        root = tmp_path / name
        sites.append({str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()})
    assert sites[0].keys() == sites[1].keys() and len(sites[0]) > 3
    assert [name for name in sites[0] if sites[0][name] != sites[1][name]] == []
    times = set(re.findall(rb"\d{8}T\d{6}\.\d{6}Z", b"".join(sites[0].values())))  # GE's timestamp format
    assert times == {b"19700101T000000.000000Z"}  # only the fixed run time, and it is there


def test_leak_across_splits_names_the_question(tmp_path):
    splits = clean_splits()
    # Differs from the train question only by case and punctuation: same normalised text.
    splits["test"].loc[0, "question"] = "who founded ROME"
    splits["test"].loc[0, "norm_question"] = normalize_question("who founded ROME")
    outcome = run(tmp_path, splits)
    assert not outcome.success
    leaks = [f for f in outcome.failures if "leak" in f]
    assert len(leaks) == 1 and "who founded rome" in leaks[0]
    assert "split=train" in leaks[0] and "split=test" in leaks[0]
    assert (tmp_path / "data_docs" / "index.html").is_file()


def test_duplicate_question_inside_one_split_is_not_a_leak(tmp_path):
    splits = with_row(clean_splits(), "train", ("hotpotqa", "t3", "Who founded Rome?", ["Romulus"]))
    assert run(tmp_path, splits).success


def test_quota_mismatch_names_dataset_expected_and_actual(tmp_path):
    splits = clean_splits()
    splits["test"] = splits["test"][splits["test"]["id"] != "s2"].reset_index(drop=True)
    outcome = run(tmp_path, splits)
    assert not outcome.success
    assert any("quota" in f and "dataset=nq, expected=2, actual=1" in f for f in outcome.failures)


def test_dataset_in_quotas_missing_from_test_fails(tmp_path):
    outcome = run(tmp_path, clean_splits(), {**QUOTAS, "musique": 3})
    assert not outcome.success
    assert any("dataset=musique, expected=3, actual=0" in f for f in outcome.failures)


def test_empty_answer_list_fails(tmp_path):
    outcome = run(tmp_path, with_row(clean_splits(), "dev", ("nq", "d2", "Who sang Lumo?", [])))
    assert not outcome.success
    assert any("at least one alias" in f and "id=d2" in f for f in outcome.failures)


def test_empty_alias_fails(tmp_path):
    outcome = run(tmp_path, with_row(clean_splits(), "dev", ("nq", "d2", "Who sang Lumo?", ["Vina", "  "])))
    assert any("no empty alias" in f and "id=d2" in f for f in outcome.failures)


def test_blank_question_fails(tmp_path):
    outcome = run(tmp_path, with_row(clean_splits(), "train", ("nq", "t9", "   ", ["x"])))
    assert not outcome.success
    assert any("question is not empty or blank" in f and "id=t9" in f for f in outcome.failures)


def test_repeated_dataset_id_across_splits_fails(tmp_path):
    outcome = run(tmp_path, with_row(clean_splits(), "dev", ("nq", "t1", "How old is Sato?", ["40"])))
    assert not outcome.success
    assert any("(dataset, id) is unique" in f and "dataset=nq, id=t1" in f for f in outcome.failures)


def test_stale_norm_question_fails(tmp_path):
    splits = clean_splits()
    splits["dev"].loc[0, "norm_question"] = "something else"
    outcome = run(tmp_path, splits)
    assert any("normalize_question" in f and "id=d1" in f for f in outcome.failures)


def test_missing_column_is_an_input_error(tmp_path):
    splits = clean_splits()
    splits["dev"] = splits["dev"].drop(columns=["norm_question"])
    with pytest.raises(InputError, match="norm_question"):
        run(tmp_path, splits)


REMOTE = re.compile(r"<(?:script|link|img|iframe)\b[^>]*\b(?:src|href)=\"(?:https?:)?//|url\(['\"]?(?:https?:)?//",
                    re.I)


def test_data_docs_load_nothing_from_the_network_and_list_every_validation(tmp_path):
    splits = with_row(clean_splits(), "test", ("nq", "s9", "Who founded Rome?", ["Romulus"]))  # a leak, a quota
    outcome = run(tmp_path, splits)
    site = tmp_path / "data_docs"
    pages = {p.relative_to(site).as_posix(): p.read_text() for p in site.rglob("*.html")}
    assert len(pages) > 3
    for name, text in pages.items():
        assert not REMOTE.search(text), (name, REMOTE.search(text).group(0))
        assert "<script" not in text, name  # GE's scripts need jQuery from a CDN
        assert "is a constant, not the time of the validation" in text, name
    index = pages["index.html"]
    rows = re.findall(r"<tr><td>(.*?)</td><td><a href=\"([^\"]+)\">(\w+)</a>", index)
    failed = {t for t, s in outcome.results["tables"].items() if not s["success"]}
    assert {table for _, _, table in rows} == set(outcome.results["tables"]) and failed
    for mark, href, table in rows:
        assert ("failed" in mark) == (table in failed) and href in pages, (table, mark, href)
        assert ("maopd-fail" if table in failed else "maopd-pass") in pages[href]  # the page's own marks
