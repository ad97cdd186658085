"""A request body decoded as JSON within two bounds: how deep it nests and how many digits a
number has.

Python's json parser recurses once per level of nesting (a body nested 100,000 deep raises
RecursionError) and refuses integers over 4,300 digits with a ValueError. Here the depth is
measured before parsing, by a vectorised scan of the bytes that skips strings, in chunks: time
linear in the body, memory bounded by the chunk. It runs only when the body holds more opening
brackets than the bound allows. The digits of each number are counted as the parser meets it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np

SCAN_CHUNK = 256 * 1024  # bytes scanned at a time: the scan's temporary arrays are ~8x this
QUOTE, BACKSLASH = 0x22, 0x5C
OPENERS, CLOSERS = (0x5B, 0x7B), (0x5D, 0x7D)  # [ {   ] }
NOT_DIGITS = "+-.eE"


class JsonBoundExceeded(ValueError):
    """The body nests deeper, or holds a longer number, than the server reads."""


def _escaped(chunk: np.ndarray, quotes: np.ndarray, carried: int) -> np.ndarray:
    """Which quotes follow an odd run of backslashes (`carried`: the run that ended the
    previous chunk)."""
    plain = np.flatnonzero(chunk != BACKSLASH)  # every quote is among them
    before = np.searchsorted(plain, quotes) - 1  # the last non-backslash before each quote
    runs = np.where(before >= 0, quotes - plain[np.maximum(before, 0)] - 1, quotes + carried)
    return runs % 2 == 1


def _trailing_backslashes(chunk: np.ndarray, carried: int) -> int:
    plain = np.flatnonzero(chunk != BACKSLASH)
    return carried + len(chunk) if len(plain) == 0 else len(chunk) - 1 - int(plain[-1])


def nesting_depth(body: bytes, stop_above: int | None = None, chunk_bytes: int = SCAN_CHUNK) -> int:
    """The deepest nesting of [ and { outside strings in the UTF-8 JSON text `body` (exact for
    valid JSON; a scan past `stop_above` stops there and returns what it has found)."""
    depth = peak = carried = 0
    in_string = False
    for offset in range(0, len(body), chunk_bytes):
        chunk = np.frombuffer(body, np.uint8, count=min(chunk_bytes, len(body) - offset), offset=offset)
        quotes = np.flatnonzero(chunk == QUOTE)
        if len(quotes) and (carried or (chunk == BACKSLASH).any()):
            quotes = quotes[~_escaped(chunk, quotes, carried)]
        opening = np.isin(chunk, OPENERS)
        brackets = np.flatnonzero(opening | np.isin(chunk, CLOSERS))
        outside = brackets[(np.searchsorted(quotes, brackets) + in_string) % 2 == 0]
        if len(outside):
            levels = depth + np.cumsum(np.where(opening[outside], 1, -1))
            peak, depth = max(peak, int(levels.max())), int(levels[-1])
        in_string ^= len(quotes) % 2 == 1
        carried = _trailing_backslashes(chunk, carried)
        if stop_above is not None and peak > stop_above:
            break
    return peak


def _counted(parse: Callable[[str], Any], max_digits: int) -> Callable[[str], Any]:
    def number(literal: str) -> Any:
        if len(literal) > max_digits:
            digits = len(literal) - sum(literal.count(c) for c in NOT_DIGITS)
            if digits > max_digits:
                raise JsonBoundExceeded(f"a number of {digits} digits exceeds max_number_digits={max_digits}")
        return parse(literal)
    return number


def loads_bounded(body: bytes, max_depth: int, max_digits: int) -> Any:
    """`body` (UTF-8, a byte-order mark allowed) parsed as JSON, or JsonBoundExceeded when it
    nests deeper than `max_depth` or holds a number of more than `max_digits` digits.
    UnicodeDecodeError and json.JSONDecodeError reach the caller as they are."""
    text = body.decode("utf-8-sig")
    if body.count(b"[") + body.count(b"{") > max_depth:
        depth = nesting_depth(body, stop_above=max_depth)
        if depth > max_depth:
            raise JsonBoundExceeded(f"JSON nested more than {max_depth} levels deep "
                                    f"(max_json_depth={max_depth})")
    return json.loads(text, parse_int=_counted(int, max_digits), parse_float=_counted(float, max_digits))
