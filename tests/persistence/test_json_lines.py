"""JSON lines: the line breaks ``json.dumps`` leaves raw written escaped, and lines read
split on ``"\\n"`` alone."""

from __future__ import annotations

import json

import pytest

from adaptive_gates.persistence.json_lines import LINE_BREAKS_LEFT_RAW, dumps_line, split_lines


@pytest.mark.parametrize("breaker", LINE_BREAKS_LEFT_RAW)
def test_a_line_break_in_a_string_is_written_escaped_and_reads_back(breaker) -> None:
    value = {"question": f"who{breaker}wrote Hamlet, é?", f"key{breaker}": [breaker]}
    line = dumps_line(value)
    assert line.endswith("\n") and len(line.splitlines()) == 1  # one line for every reader
    assert breaker not in line and "é" in line  # other non-ASCII text stays readable
    assert json.loads(line) == value


def test_every_line_break_str_splitlines_knows_is_escaped() -> None:
    breakers = [chr(c) for c in range(0x3000) if len(f"a{chr(c)}b".splitlines()) == 2]
    line = dumps_line("".join(breakers))
    assert len(line.splitlines()) == 1 and json.loads(line) == "".join(breakers)


def test_lines_split_on_newline_only() -> None:
    text = '{"q": "a\u2028b"}\n{"q": "c\u0085d\u2029"}\r\n\n'
    assert split_lines(text) == ['{"q": "a\u2028b"}', '{"q": "c\u0085d\u2029"}\r', ""]
    assert [json.loads(line) for line in split_lines(text)[:2]] == [{"q": "a\u2028b"}, {"q": "c\u0085d\u2029"}]
    assert split_lines("") == [] and split_lines("x") == ["x"]
