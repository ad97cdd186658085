"""Great Expectations suite for mask integrity of the trajectory audit tables (docs/method.md §4)."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import great_expectations as gx
import pandas as pd

from pipeline.domain import ROLES as DOMAIN_ROLES
from pipeline.domain import SOURCES as DOMAIN_SOURCES
from pipeline.errors import InputError
from pipeline.validate.gx_runner import TableCheck, ValidationOutcome, check, run_table_checks

ROLES = list(DOMAIN_ROLES)
SOURCES = list(DOMAIN_SOURCES)
SAMPLE_COLUMNS = ["sample_id", "role", "action", "response_text"]
TOKEN_COLUMNS = ["sample_id", "pos", "token_id", "role", "source", "loss_mask"]
REPORT = re.compile(r"<report>(.*?)</report>", re.DOTALL)
OBSERVATION = re.compile(r"<information>.*?</information>", re.DOTALL)

Decode = Callable[[list[int]], str]


def validate_masks(
    samples: pd.DataFrame,
    tokens: pd.DataFrame,
    docs_dir: Path,
    decode: Decode | None = None,
) -> ValidationOutcome:
    """Check roles, sources and loss masks of every token and the reports' ownership."""
    _require(samples, SAMPLE_COLUMNS, "samples")
    _require(tokens, TOKEN_COLUMNS, "tokens")
    tables = [
        # Token failures are named by sample: a bad sample usually has many bad tokens.
        TableCheck("tokens", token_checks_frame(tokens, samples), ["sample_id"], _token_expectations()),
        TableCheck("samples", sample_checks_frame(samples, tokens, decode), ["sample_id"],
                   _sample_expectations(decode is not None)),
    ]
    return run_table_checks("masks", tables, docs_dir)


def token_checks_frame(tokens: pd.DataFrame, samples: pd.DataFrame) -> pd.DataFrame:
    """Token rows with their sample's role attached (left join on sample_id)."""
    owners = samples[["sample_id", "role"]].drop_duplicates("sample_id")
    owners = owners.rename(columns={"role": "sample_role"})
    frame = tokens[TOKEN_COLUMNS].merge(owners, on="sample_id", how="left", validate="many_to_one")
    frame["sample_known"] = frame["sample_role"].notna()
    frame["role_matches_sample"] = (frame["role"] == frame["sample_role"]).fillna(False).astype(bool)
    return frame.drop(columns=["token_id"])


def sample_checks_frame(samples: pd.DataFrame, tokens: pd.DataFrame, decode: Decode | None) -> pd.DataFrame:
    """One row per sample with the derived booleans the sample expectations test.

    The generated text is the decoded generated tokens when `decode` is given, otherwise
    response_text with its <information> observations cut out.
    """
    frame = samples[SAMPLE_COLUMNS].copy()
    malformed = samples.get("malformed", pd.Series(False, index=samples.index)).fillna(False).astype(bool)
    frame["response_text"] = frame["response_text"].fillna("").astype(str)
    frame["action"] = frame["action"].fillna("").astype(str)
    if decode is None:
        generated = frame["response_text"].map(lambda text: OBSERVATION.sub("", text))
    else:
        generated_only = tokens[tokens["source"] == "generated"]
        generated = frame["sample_id"].map(_decoded_texts(generated_only, decode)).fillna("")
        decoded = frame["sample_id"].map(_decoded_texts(tokens[tokens["source"] != "padding"], decode))
        frame["decodes_to_response_text"] = (decoded == frame["response_text"]).fillna(False).astype(bool)
    # A malformed Leader/Answerer call may emit any text, a stray "<report>" tag included;
    # that is the model's own (penalised) output, not a Searcher's report leaking into a
    # trainable position, so only well-formed calls are held to this rule.
    outside_searcher = frame["role"].isin(["leader", "answerer"]) & ~malformed
    frame["report_outside_searcher"] = outside_searcher & (
        (frame["action"] == "report") | generated.str.contains("<report>", regex=False)
    )
    frame["is_searcher_report"] = (frame["role"] == "searcher") & (frame["action"] == "report") & ~malformed
    frame["report_in_generated"] = [
        _report_generated(text, gen) for text, gen in zip(frame["response_text"], generated)
    ]
    return frame.drop(columns=["response_text"])


def _decoded_texts(tokens: pd.DataFrame, decode: Decode) -> dict[str, str]:
    """sample_id -> decode of its token ids in pos order."""
    ordered = tokens.sort_values(["sample_id", "pos"])
    return {
        sample_id: decode([int(t) for t in ids])
        for sample_id, ids in ordered.groupby("sample_id", sort=False)["token_id"]
    }


def _report_generated(response_text: str, generated_text: str) -> bool:
    """The last <report>...</report> of the response lies in the generated text."""
    reports = REPORT.findall(response_text)
    return bool(reports) and f"<report>{reports[-1]}</report>" in generated_text


def _token_expectations() -> list[Any]:
    E = gx.expectations
    return [
        check(E.ExpectColumnValuesToNotBeNull(column="role"), "every token has a role"),
        check(E.ExpectColumnValuesToBeInSet(column="role", value_set=ROLES),
              "token role is leader/searcher/answerer"),
        check(E.ExpectColumnValuesToNotBeNull(column="source"), "every token has a source"),
        check(E.ExpectColumnValuesToBeInSet(column="source", value_set=SOURCES),
              "token source is generated/observation/padding"),
        check(E.ExpectColumnValuesToNotBeNull(column="loss_mask"), "every token has a loss_mask"),
        check(E.ExpectColumnValuesToBeInSet(column="loss_mask", value_set=[0, 1]), "loss_mask is 0 or 1"),
        _zero_loss_mask_where('source != "generated"', "loss_mask is 1 only on generated tokens"),
        _zero_loss_mask_where('source == "observation"', "observation tokens have loss_mask 0"),
        _zero_loss_mask_where('source == "padding"', "padding tokens have loss_mask 0"),
        check(E.ExpectColumnValuesToBeInSet(column="sample_known", value_set=[True]),
              "every token belongs to a known sample"),
        check(E.ExpectColumnValuesToBeInSet(column="role_matches_sample", value_set=[True]),
              "token role equals its sample's role"),
        check(E.ExpectCompoundColumnsToBeUnique(column_list=["sample_id", "pos"]), "(sample_id, pos) is unique"),
    ]


def _zero_loss_mask_where(row_condition: str, description: str) -> Any:
    expectation = gx.expectations.ExpectColumnValuesToBeInSet(
        column="loss_mask", value_set=[0], row_condition=row_condition, condition_parser="pandas"
    )
    return check(expectation, description)


def _sample_expectations(decoded: bool) -> list[Any]:
    E = gx.expectations
    expectations = [
        check(E.ExpectColumnValuesToBeUnique(column="sample_id"), "sample_id is unique"),
        check(E.ExpectColumnValuesToBeInSet(column="role", value_set=ROLES),
              "sample role is leader/searcher/answerer"),
        check(E.ExpectColumnValuesToBeInSet(column="report_outside_searcher", value_set=[False]),
              "well-formed Leader and Answerer samples never generate a <report>"),
        check(E.ExpectColumnValuesToBeInSet(column="report_in_generated", value_set=[True],
                                            row_condition="is_searcher_report == True",
                                            condition_parser="pandas"),
              "a Searcher's report is in the generated part of its own sample"),
    ]
    if decoded:
        expectations.append(
            check(E.ExpectColumnValuesToBeInSet(column="decodes_to_response_text", value_set=[True]),
                  "response token ids (no padding) decode to response_text")
        )
    return expectations


def _require(frame: pd.DataFrame, columns: list[str], name: str) -> None:
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise InputError(f"{name} table lacks columns {missing}; expected at least {columns}")
