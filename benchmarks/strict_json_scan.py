"""The time ``strict_json.loads`` takes on adversarial text, per megabyte.

Every JSON line and saved config the package reads goes through ``strict_json.loads``,
whose nesting scan runs before the parser whenever a text opens more brackets than
``MAX_DEPTH``. Four shapes a stranger could write, each at 0.1, 1 and 4 MB: a string
of escaped quotes never closed (behind 65 brackets), escaped quotes outside any string,
one valid string of escapes and brackets, and plain brackets. The scan is one pass, so
the time per MB stays flat as the input grows (the regular expression it replaced took
21 s on 80 KB of escaped quotes, and time quadratic in the length).

    .venv/bin/python benchmarks/strict_json_scan.py [--repeats 3]

Writes benchmarks/results/strict_json_scan.{md,json}.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Callable

from _common import markdown_table, write_results
from adaptive_gates.persistence.strict_json import MAX_DEPTH, loads

SIZES_MB = (0.1, 1.0, 4.0)


def _repeat(unit: bytes, size: int) -> bytes:
    return unit * max(1, size // len(unit))


SHAPES: dict[str, Callable[[int], bytes]] = {
    'unclosed string of \\" behind 65 [': lambda n: b"[" * (MAX_DEPTH + 1) + b'"' + _repeat(b'\\"', n),
    '\\" outside any string, then 65 [': lambda n: _repeat(b'\\"', n) + b"[" * (MAX_DEPTH + 1),
    'one valid string of \\"[{\\\\': lambda n: b'["' + _repeat(b'\\"[{\\\\', n) + b'"]',
    "plain [": lambda n: _repeat(b"[", n),
}


def _seconds(raw: bytes, repeats: int) -> float:
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        with contextlib.suppress(ValueError):  # refused or parsed: the time is what counts
            loads(raw)
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each input; the fastest is reported")
    args = parser.parse_args()
    rows, data = [], []
    for shape, make in SHAPES.items():
        for mb in SIZES_MB:
            raw = make(int(mb * 1_000_000))
            seconds = _seconds(raw, args.repeats)
            per_mb = seconds / (len(raw) / 1_000_000)
            rows.append([shape, mb, seconds, per_mb])
            data.append({"shape": shape, "mb": mb, "bytes": len(raw), "seconds": seconds, "seconds_per_mb": per_mb})
            print(f"{shape:40s} {mb:5.1f} MB  {seconds:8.4f} s  {per_mb:8.4f} s/MB", flush=True)
    markdown = "# strict_json.loads on adversarial text\n\n" + markdown_table(
        ["shape", "MB", "seconds (best of runs)", "seconds per MB"], rows
    )
    md, js = write_results("strict_json_scan", markdown, {"repeats": args.repeats, "runs": data})
    print(f"wrote {md} and {js}")


if __name__ == "__main__":
    main()
