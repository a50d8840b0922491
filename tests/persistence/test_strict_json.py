"""JSON from strangers' files: bounded depth, finite numbers, one kind of error."""

from __future__ import annotations

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
