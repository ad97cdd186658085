"""docs/retriever.md states the defaults the code has: each option of its limits table, the
encoder batch, the queue and the JSON bounds."""

from __future__ import annotations

import re

import pytest

from pipeline.cli import _parser
from pipeline.retrieval.limits import MAX_WAITING_REQUESTS, ServerLimits

from .conftest import REPO_ROOT

DOC = (REPO_ROOT / "docs" / "retriever.md").read_text()
DEFAULTS = vars(_parser().parse_args(["serve-retriever"]))


def documented(pattern: str) -> float:
    found = re.findall(pattern, DOC)
    assert len(found) == 1, f"docs/retriever.md: expected one match of {pattern!r}, found {found}"
    return float(found[0].replace(",", ""))


@pytest.mark.parametrize("option", ["--max-batch", "--max-k", "--max-query-chars", "--max-body-mb",
                                    "--body-timeout", "--header-timeout", "--max-connections"])
def test_each_option_in_the_limits_table_has_the_codes_default(option):
    assert documented(rf"\| `{option}` \(([\d,.]+)") == DEFAULTS[option[2:].replace("-", "_")]


def test_the_other_documented_defaults_are_the_codes():
    assert documented(r"`--encode-batch` queries, default ([\d,]+)") == DEFAULTS["encode_batch"]
    assert documented(r"more than ([\d,]+) requests waiting") == MAX_WAITING_REQUESTS
    assert documented(r"JSON nesting depth \((\d+) levels") == ServerLimits.max_json_depth
    assert documented(r"number size \((\d+) digits") == ServerLimits.max_number_digits
    assert documented(r"`--max-k` \(50\) \| 422 `topk must be in \[1, (\d+)\]`") == ServerLimits.max_k
