"""Request bodies parsed within bounds: the depth scan agrees with the parsed value's depth on
any JSON (strings full of brackets, quotes and backslashes, across scan chunks), and bodies
past either bound are refused before Python's parser fails on them."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline.retrieval.request_json import JsonBoundExceeded, loads_bounded, nesting_depth


def depth_of(value) -> int:
    if isinstance(value, list):
        return 1 + max(map(depth_of, value), default=0)
    if isinstance(value, dict):
        return 1 + max(map(depth_of, value.values()), default=0)
    return 0


tricky_text = st.text(alphabet=st.sampled_from('[]{}"\\ aé\u2028'), max_size=12)
values = st.recursive(st.none() | st.integers() | st.booleans() | tricky_text,
                      lambda inner: st.lists(inner, max_size=4) | st.dictionaries(tricky_text, inner, max_size=3),
                      max_leaves=25)


@settings(max_examples=400, deadline=None)
@given(value=values, ascii_only=st.booleans(), chunk=st.sampled_from([1, 2, 3, 7, 4096]))
def test_the_depth_scan_matches_the_parsed_depth(value, ascii_only, chunk):
    body = json.dumps(value, ensure_ascii=ascii_only).encode()
    assert nesting_depth(body, chunk_bytes=chunk) == depth_of(value)


def test_escaped_quotes_and_backslash_runs_are_read_as_the_parser_reads_them():
    assert nesting_depth(rb'["\"[[[[", "\\\\", [[]]]', chunk_bytes=2) == 3
    assert nesting_depth(rb'{"a\\\"]]]": [[["x\\"]]]}', chunk_bytes=1) == 4


@pytest.mark.parametrize("body", [
    b"[" * 100_000 + b"]" * 100_000,
    b'{"queries": ["a"], "extra": ' + b'{"k": ' * 100_000 + b"1" + b"}" * 100_000 + b"}",
    b'{"queries": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b"[" * 100_000,  # not even JSON: refused for its depth before the parser recurses
])
def test_deep_bodies_are_refused_before_parsing(body):
    with pytest.raises(JsonBoundExceeded, match="nested more than 32 levels"):
        loads_bounded(body, max_depth=32, max_digits=100)


def test_depth_at_the_bound_is_parsed():
    body = ("[" * 32 + "]" * 32).encode()
    assert depth_of(loads_bounded(body, max_depth=32, max_digits=100)) == 32
    with pytest.raises(JsonBoundExceeded):
        loads_bounded(b"[" + body + b"]", max_depth=32, max_digits=100)


@pytest.mark.parametrize("literal", ["1" * 5000, "-" + "9" * 101, "1." + "0" * 100, "1" * 60 + "e" + "1" * 41])
def test_long_numbers_are_refused(literal):
    with pytest.raises(JsonBoundExceeded, match=r"digits exceeds max_number_digits=100"):
        loads_bounded(f'{{"queries": ["a"], "x": {literal}}}'.encode(), max_depth=32, max_digits=100)


def test_numbers_within_the_bound_are_parsed_exactly():
    body = f'{{"a": {"9" * 100}, "b": -{"1" * 100}, "c": 1.5e3, "d": 0.{"1" * 98}}}'.encode()
    got = loads_bounded(body, max_depth=32, max_digits=100)
    assert got["a"] == int("9" * 100) and got["b"] == -int("1" * 100) and got["c"] == 1500.0
    assert got == json.loads(body)


def test_a_byte_order_mark_is_accepted_and_other_encodings_are_not_utf8():
    assert loads_bounded(b"\xef\xbb\xbf" + b'{"queries": ["a"]}', 32, 100) == {"queries": ["a"]}
    with pytest.raises(UnicodeDecodeError):
        loads_bounded('{"queries": ["a"]}'.encode("utf-16"), 32, 100)
