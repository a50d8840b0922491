"""JSON parsed from files a stranger may have written: bounded in depth, finite numbers only.

Python's ``json`` recurses once per nesting level, so a file of 100,000 ``[`` raises
``RecursionError``; it reads ``NaN``, ``Infinity`` and ``1e999`` as non-finite floats
that no record or saved gate holds; and an integer of more digits than Python converts
raises a ``ValueError`` of its own words. ``loads`` refuses all three, and anything
else that is no valid JSON, with one ``ValueError`` saying what is wrong; each reader
adds the file and line or field.
"""

from __future__ import annotations

import json
import math
from typing import Any

import numpy as np

#: The deepest nesting of arrays and objects accepted. A saved gate's config.json (a
#: budget around a cascade, members embedded in the old flat layout) and an outcome
#: record's context nest a dozen levels at most.
MAX_DEPTH = 64

#: The longest integer accepted, in characters: below Python's own limit on converting
#: digits (4,300), whose error would otherwise escape in its own words.
MAX_INT_DIGITS = 1000

_QUOTE, _BACKSLASH = ord('"'), ord("\\")
_OPENING, _CLOSING = np.frombuffer(b"[{", np.uint8), np.frombuffer(b"]}", np.uint8)


def nesting_depth(raw: bytes) -> int:
    """The deepest nesting of ``[``/``{`` in the JSON text ``raw``, strings left out
    (unbalanced text counts as written).

    One pass in numpy, without recursing, in time linear in the length whatever the
    text: a quote closes or opens a string unless an odd run of backslashes precedes
    it, and a bracket counts when an even number of such quotes precedes it. In valid
    JSON a backslash occurs only inside a string, so this is JSON's own reading; where
    a backslash stands outside one, the parser stops there, and the count up to that
    point is its own too.
    """
    codes = np.frombuffer(raw, np.uint8)
    if not codes.size:
        return 0
    positions = np.arange(codes.size)
    # the index of the last byte that is no backslash, at or before each position
    last_other = np.maximum.accumulate(np.where(codes == _BACKSLASH, -1, positions))
    # the length of the run of backslashes just before each position
    run_before = np.empty(codes.size, np.int64)
    run_before[0] = 0
    run_before[1:] = positions[:-1] - last_other[:-1]
    quotes = (codes == _QUOTE) & (run_before % 2 == 0)
    outside = np.cumsum(quotes) % 2 == 0  # a quote itself is no bracket: either side will do
    steps = (np.isin(codes, _OPENING).astype(np.int64) - np.isin(codes, _CLOSING)) * outside
    return int(np.cumsum(steps).max(initial=0))


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"the number {text} is out of range (beyond a float)")
    return value


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise ValueError(f"an integer of {len(text)} digits is too long (at most {MAX_INT_DIGITS})")
    return int(text)


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a number JSON allows (only finite numbers are accepted)")


def loads(raw: bytes | str) -> Any:
    """The JSON value of ``raw``; ``ValueError`` saying what is wrong when it is no
    valid JSON, is nested deeper than ``MAX_DEPTH``, or holds a non-finite number or an
    integer too long to convert. ``UnicodeDecodeError`` (a ``ValueError``) for bytes
    that are not UTF-8."""
    data = raw.encode("utf-8") if isinstance(raw, str) else raw
    # the scan only where it can find too deep a nesting: most lines open few brackets
    depth = nesting_depth(data) if data.count(b"[") + data.count(b"{") > MAX_DEPTH else 0
    if depth > MAX_DEPTH:
        raise ValueError(f"nested {depth} levels deep, more than the {MAX_DEPTH} accepted")
    text = raw if isinstance(raw, str) else raw.decode("utf-8")
    try:
        return json.loads(text, parse_float=_finite_float, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not valid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:  # unreachable past the depth check; kept as the last guard
        raise ValueError("nested too deep") from None
