"""JSON lines as the package writes and reads them: one JSON value a line, lines ended by
``"\\n"`` alone.

``json.dumps(..., ensure_ascii=False)`` leaves U+2028, U+2029 and U+0085 raw in a
string, and ``str.splitlines()`` (like many readers in other languages) breaks a line at
each of them, so one question holding such a character would split its record in two.
``dumps_line`` writes them escaped (``\\u2028``...), so every reader sees one record a
line; ``split_lines`` reads a file written before that (or by anyone else) by splitting
on ``"\\n"`` only.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = ["LINE_BREAKS_LEFT_RAW", "dumps_line", "split_lines"]

#: The characters ``str.splitlines()`` breaks a line at that ``json.dumps`` leaves raw
#: (it escapes every control character below U+0020 itself).
LINE_BREAKS_LEFT_RAW = ("\u0085", "\u2028", "\u2029")

_ESCAPED = str.maketrans({c: f"\\u{ord(c):04x}" for c in LINE_BREAKS_LEFT_RAW})


def dumps_line(value: Any) -> str:
    """``value`` as one JSON line, newline included: non-ASCII text kept readable, the
    line breaks of ``LINE_BREAKS_LEFT_RAW`` escaped. They occur only inside JSON
    strings, where the escape reads back as the same character."""
    return json.dumps(value, ensure_ascii=False).translate(_ESCAPED) + "\n"


def split_lines(text: str) -> list[str]:
    """The lines of ``text`` split on ``"\\n"`` only (a ``"\\r"`` before it kept, which
    JSON reads as white space); no last empty line for a text that ends with one."""
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    return lines
