"""JSON from strangers' files: bounded depth, finite numbers, one kind of error."""

from __future__ import annotations

import json

import pytest

from adaptive_gates.persistence.strict_json import MAX_DEPTH, MAX_INT_DIGITS, loads, nesting_depth


def test_valid_json_reads_from_bytes_and_text():
    raw = '{"question": "wer?", "answers": ["a", "b"], "score": 0.25, "n": -3, "ok": true, "x": null}'
    expected = {"question": "wer?", "answers": ["a", "b"], "score": 0.25, "n": -3, "ok": True, "x": None}
    assert loads(raw) == expected
    assert loads(raw.encode()) == expected


def test_nesting_up_to_the_limit_is_accepted_and_beyond_refused():
    assert loads("[" * MAX_DEPTH + "]" * MAX_DEPTH) is not None
    with pytest.raises(ValueError, match=f"nested {MAX_DEPTH + 1} levels deep, more than the {MAX_DEPTH}"):
        loads("[" * (MAX_DEPTH + 1) + "]" * (MAX_DEPTH + 1))


def test_a_hundred_thousand_brackets_are_a_value_error_not_a_recursion_error():
    with pytest.raises(ValueError, match="nested 100000 levels deep"):
        loads(b"[" * 100_000)


def test_brackets_inside_strings_do_not_count():
    text = '["' + "[{" * 500 + '\\"[["]'
    assert loads(text) == ["[{" * 500 + '"[[']
    assert nesting_depth(text.encode()) == 1


def test_nesting_depth_counts_what_is_written():
    assert nesting_depth(b"") == 0
    assert nesting_depth(b"1") == 0
    assert nesting_depth(b'{"a": [[1], {"b": [2]}]}') == 4
    assert nesting_depth(b"[[[") == 3  # unbalanced: counted as written
    assert nesting_depth(b"]]]") == 0


def _depth(value) -> int:
    """The nesting of a parsed value, counted on the value itself."""
    if isinstance(value, dict):
        return 1 + max(map(_depth, value.values()), default=0)
    if isinstance(value, list):
        return 1 + max(map(_depth, value), default=0)
    return 0


@pytest.mark.parametrize(
    "value",
    [
        ["\\", ["\\\\"], {"a\\": ['"[', {']\\"': ["\\\\\\"]}]}],
        {'\\"{': [[[["\\"], "]]]"]]], "x": "\\\\\\\\"},
        [[[[[[[["\\" * n + '"' + "[" * n for n in range(8)]]]]]]]],
        {"q": 'a "quoted" [word] {with} \\ backslashes \\"[', "deep": [[[{"\\": [[]]}]]]},
    ],
)
def test_the_depth_of_escaped_quotes_and_backslashes_is_the_parsers(value):
    """Quotes after runs of backslashes of either parity, brackets in strings and out."""
    for raw in (json.dumps(value), json.dumps(value, indent=1), json.dumps(value, ensure_ascii=False)):
        assert nesting_depth(raw.encode()) == _depth(value)


def test_a_backslash_outside_a_string_counts_the_brackets_the_parser_reaches():
    assert nesting_depth(b'[[\\"[[') == 4  # not JSON: the parser stops at the backslash
    with pytest.raises(ValueError, match="not valid JSON"):
        loads(b"[[\\" + b'"' * (MAX_DEPTH + 1))


# Two megabytes each: a scan in time quadratic in the length (the regular expression
# this one replaced, retrying a string from every quote) would run for hours on them.
_ESCAPED_QUOTES = b'\\"' * 1_000_000
_ADVERSARIAL = [
    (b"[" * (MAX_DEPTH + 1) + b'"' + _ESCAPED_QUOTES, f"nested {MAX_DEPTH + 1} levels deep"),  # a string never closed
    (_ESCAPED_QUOTES + b"[" * (MAX_DEPTH + 1), f"nested {MAX_DEPTH + 1} levels deep"),  # escapes outside any string
    (b'["' + b'\\"[{\\\\' * 400_000 + b'"]', None),  # one valid string of escapes and brackets
    # each quote after an even run closes a string: half the brackets are outside, as written
    (b'["' + b'\\\\"[' * 500_000 + b'"]', "nested 250001 levels deep"),
]


@pytest.mark.parametrize(("raw", "refused"), _ADVERSARIAL, ids=["unclosed", "outside", "valid", "even-runs"])
def test_megabytes_of_escaped_quotes_are_scanned_in_one_pass(raw, refused):
    assert len(raw) >= 2_000_000
    if refused is None:
        assert loads(raw) == [json.loads(raw)[0]] and nesting_depth(raw) == 1
    else:
        with pytest.raises(ValueError, match=refused):
            loads(raw)


@pytest.mark.parametrize("raw", ["NaN", "[Infinity]", '{"x": -Infinity}'])
def test_non_finite_constants_are_refused(raw):
    with pytest.raises(ValueError, match="is not a number JSON allows"):
        loads(raw)


@pytest.mark.parametrize("raw", ["1e999", "[-1e400]"])
def test_numbers_beyond_a_float_are_refused(raw):
    with pytest.raises(ValueError, match="out of range"):
        loads(raw)


def test_integers_are_bounded_in_length():
    assert loads("9" * MAX_INT_DIGITS) == int("9" * MAX_INT_DIGITS)
    with pytest.raises(ValueError, match=f"an integer of {MAX_INT_DIGITS + 1} digits is too long"):
        loads("9" * (MAX_INT_DIGITS + 1))
    with pytest.raises(ValueError, match="an integer of 5000 digits"):
        loads("1" * 5000)  # past Python's own limit: still our words


@pytest.mark.parametrize(
    ("raw", "where"),
    [('{"a": 1,}', "line 1 column 9"), ("[1, 2]\n[3]", "line 2 column 1"), ("", "line 1 column 1")],
)
def test_invalid_json_says_where(raw, where):
    with pytest.raises(ValueError, match=f"^not valid JSON \\(.* at {where}\\)$"):
        loads(raw)


def test_bytes_that_are_not_utf8_raise_unicode_decode_error():
    with pytest.raises(UnicodeDecodeError):
        loads(b'{"a": "\xff"}')
