"""The masks suite passes a clean audit batch and names each planted violation."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pipeline.errors import InputError
from pipeline.validate.masks import validate_masks

Segment = tuple[str, str]  # (text, source); one character = one token


def decode(ids: list[int]) -> str:
    return "".join(chr(i) for i in ids)


def sample(sample_id: str, role: str, action: str, segments: list[Segment], padding: int = 0):
    """One samples row and its token rows: generated tokens trainable, others masked."""
    tokens = []
    for text, source in segments:
        tokens += [(ord(ch), source) for ch in text]
    tokens += [(0, "padding")] * padding
    token_rows = [
        {"sample_id": sample_id, "pos": pos, "token_id": tid, "role": role, "source": source,
         "loss_mask": int(source == "generated"), "old_logp": 0.0, "teacher_logp": float("nan"),
         "advantage": 0.0}
        for pos, (tid, source) in enumerate(tokens)
    ]
    row = {"sample_id": sample_id, "role": role, "action": action, "malformed": False,
           "response_text": "".join(text for text, _ in segments)}
    return row, token_rows


def audit_batch() -> tuple[pd.DataFrame, pd.DataFrame]:
    built = [
        sample("q1/t0/c0", "leader", "dispatch",
               [("<dispatch><task>find Kalo</task></dispatch>", "generated")]),
        sample("q1/t0/c1", "searcher", "report", [
            ("<search>Kalo</search>", "generated"),
            ('\n\n<information>Doc 1(Title: "Kalo") Kalo is a river.</information>\n\n', "observation"),
            ("<think>ok</think><report>Kalo is a river</report>", "generated"),
        ], padding=3),
        sample("q1/t0/c2", "leader", "answer_with", [("<answer_with>R1</answer_with>", "generated")]),
        sample("q1/t0/c3/k0", "answerer", "answer", [("<answer>a river</answer>", "generated")], padding=2),
        sample("q1/t0/c3/k1", "answerer", "answer", [("<answer>river</answer>", "generated")]),
    ]
    samples = pd.DataFrame([row for row, _ in built])
    tokens = pd.DataFrame([t for _, rows in built for t in rows])
    return samples, tokens


def run(tmp_path: Path, samples: pd.DataFrame, tokens: pd.DataFrame, with_decode: bool = True):
    return validate_masks(samples, tokens, tmp_path / "data_docs", decode if with_decode else None)


def failing(outcome, phrase: str) -> list[str]:
    return [f for f in outcome.failures if phrase in f]


def test_clean_batch_passes_and_writes_data_docs(tmp_path):
    samples, tokens = audit_batch()
    outcome = run(tmp_path, samples, tokens)
    assert outcome.success, outcome.failures
    assert (tmp_path / "data_docs" / "index.html").is_file()
    summary = json.loads(json.dumps(outcome.results))
    checks = [e["check"] for t in summary["tables"].values() for e in t["expectations"]]
    assert "response token ids (no padding) decode to response_text" in checks


def test_clean_batch_passes_without_decode(tmp_path):
    samples, tokens = audit_batch()
    outcome = run(tmp_path, samples, tokens, with_decode=False)
    assert outcome.success, outcome.failures
    assert not any("decode" in e["check"] for e in outcome.results["tables"]["samples"]["expectations"])


def test_trainable_observation_token_fails(tmp_path):
    samples, tokens = audit_batch()
    row = tokens.index[(tokens["sample_id"] == "q1/t0/c1") & (tokens["source"] == "observation")][0]
    tokens.loc[row, "loss_mask"] = 1
    outcome = run(tmp_path, samples, tokens)
    assert not outcome.success
    assert failing(outcome, "observation tokens have loss_mask 0")[0].endswith("1 row(s): sample_id=q1/t0/c1")
    assert failing(outcome, "loss_mask is 1 only on generated tokens")
    assert not failing(outcome, "padding tokens")


def test_trainable_padding_token_fails(tmp_path):
    samples, tokens = audit_batch()
    row = tokens.index[(tokens["sample_id"] == "q1/t0/c3/k0") & (tokens["source"] == "padding")][-1]
    tokens.loc[row, "loss_mask"] = 1
    outcome = run(tmp_path, samples, tokens)
    assert not outcome.success
    assert "sample_id=q1/t0/c3/k0" in failing(outcome, "padding tokens have loss_mask 0")[0]


def test_loss_mask_outside_zero_one_fails(tmp_path):
    samples, tokens = audit_batch()
    tokens.loc[0, "loss_mask"] = 2
    assert failing(run(tmp_path, samples, tokens), "loss_mask is 0 or 1")


def test_unknown_source_and_missing_role_fail(tmp_path):
    samples, tokens = audit_batch()
    tokens.loc[tokens["sample_id"] == "q1/t0/c0", "source"] = "prompt"
    tokens.loc[tokens["sample_id"] == "q1/t0/c2", "role"] = None
    outcome = run(tmp_path, samples, tokens, with_decode=False)
    assert failing(outcome, "token source is")[0].endswith("row(s): sample_id=q1/t0/c0")
    assert failing(outcome, "every token has a role")[0].endswith("row(s): sample_id=q1/t0/c2")


def test_token_role_differs_from_sample_fails(tmp_path):
    samples, tokens = audit_batch()
    tokens.loc[tokens["sample_id"] == "q1/t0/c2", "role"] = "answerer"
    outcome = run(tmp_path, samples, tokens)
    assert not outcome.success
    assert "sample_id=q1/t0/c2" in failing(outcome, "token role equals its sample's role")[0]


def test_token_of_unknown_sample_fails(tmp_path):
    samples, tokens = audit_batch()
    samples = samples[samples["sample_id"] != "q1/t0/c2"].reset_index(drop=True)
    outcome = run(tmp_path, samples, tokens, with_decode=False)
    assert "sample_id=q1/t0/c2" in failing(outcome, "every token belongs to a known sample")[0]


def test_repeated_position_fails(tmp_path):
    samples, tokens = audit_batch()
    tokens.loc[tokens["sample_id"] == "q1/t0/c0", "pos"] = 0
    outcome = run(tmp_path, samples, tokens, with_decode=False)
    assert failing(outcome, "(sample_id, pos) is unique")[0].endswith("row(s): sample_id=q1/t0/c0")


@pytest.mark.parametrize("with_decode", [True, False])
def test_leader_generating_a_report_fails(tmp_path, with_decode):
    text = "<report>Kalo is a river</report><dispatch><task>x</task></dispatch>"
    row, token_rows = sample("q1/t0/c4", "leader", "dispatch", [(text, "generated")])
    samples, tokens = audit_batch()
    samples = pd.concat([samples, pd.DataFrame([row])], ignore_index=True)
    tokens = pd.concat([tokens, pd.DataFrame(token_rows)], ignore_index=True)
    outcome = run(tmp_path, samples, tokens, with_decode=with_decode)
    assert not outcome.success
    assert failing(outcome, "never generate a <report>")[0].endswith("sample_id=q1/t0/c4")


def test_answerer_with_report_action_fails(tmp_path):
    samples, tokens = audit_batch()
    samples.loc[samples["sample_id"] == "q1/t0/c3/k1", "action"] = "report"
    outcome = run(tmp_path, samples, tokens)
    assert "sample_id=q1/t0/c3/k1" in failing(outcome, "never generate a <report>")[0]


def test_searcher_report_only_in_observation_fails(tmp_path):
    samples, tokens = audit_batch()
    report_start = samples.loc[1, "response_text"].index("<report>")
    searcher = tokens["sample_id"] == "q1/t0/c1"
    in_report = searcher & (tokens["pos"] >= report_start) & (tokens["source"] != "padding")
    tokens.loc[in_report, ["source", "loss_mask"]] = ["observation", 0]
    outcome = run(tmp_path, samples, tokens)
    assert "sample_id=q1/t0/c1" in failing(outcome, "report is in the generated part of its own sample")[0]


def test_decode_mismatch_names_the_sample(tmp_path):
    samples, tokens = audit_batch()
    samples.loc[samples["sample_id"] == "q1/t0/c3/k0", "response_text"] = "<answer>a lake</answer>"
    outcome = run(tmp_path, samples, tokens)
    assert not outcome.success
    assert failing(outcome, "decode to response_text") == [
        "samples: response token ids (no padding) decode to response_text "
        "[expect_column_values_to_be_in_set] failed on 1 row(s): sample_id=q1/t0/c3/k0"
    ]


def test_missing_token_column_is_an_input_error(tmp_path):
    samples, tokens = audit_batch()
    with pytest.raises(InputError, match="loss_mask"):
        run(tmp_path, samples, tokens.drop(columns=["loss_mask"]))
