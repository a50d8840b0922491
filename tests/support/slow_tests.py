"""The slowest tests, marked ``slow`` from measurement so the developer's loop
(``make test-fast``) can leave them out; ``make test`` runs them all.

``slow_tests.txt`` lists each test (its path from the repository root and its name)
whose CPU time, its own process's and that of the processes it started and waited for,
was at least ``SLOW_CPU_SECONDS`` in a whole run. CPU time, not wall time: a loaded
machine makes a test slower by the clock, not by what it computes. ``make slow-tests``
measures every suite and writes the list again, then measures the fast loop's tests
and adds those that now pay a setup a listed test paid; a new test is not slow until
then, so the fast loop grows rather than misses a test it should have run.
"""

from __future__ import annotations

import json
import os
import resource
import sys
import time
from collections.abc import Generator
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SLOW_LIST = Path(__file__).with_name("slow_tests.txt")
#: Set to a file to append each test's CPU seconds to it (one JSON object a line).
RECORD_ENV = "ADAPTIVE_GATES_RECORD_CPU"
SLOW_CPU_SECONDS = 2.0

#: The CPU seconds at which each running test began (a worker runs one test at a time).
_began: dict[str, float] = {}


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that have ended and been waited for."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def repo_test_id(rootpath: Path, nodeid: str) -> str:
    """``nodeid`` (relative to its session's root) as ``path/from/repo.py::name``, so the
    three suites, each run from its own folder, share one list (a suite elsewhere, such
    as one a test writes, keeps its absolute path)."""
    path, _, name = nodeid.partition("::")
    file = (rootpath / path).resolve()
    return f"{(file.relative_to(REPO) if file.is_relative_to(REPO) else file).as_posix()}::{name}"


def read_slow_list(path: Path) -> dict[str, float]:
    """Each test a list names, with its CPU seconds (none without a list)."""
    if not path.exists():
        return {}
    lines = path.read_text(encoding="utf-8").splitlines()
    entries = (line.rsplit(" ", 1) for line in lines if line[:1] not in ("", "#"))
    return {test: float(seconds) for test, seconds in entries}


def mark_slow(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the ``slow`` mark to the listed tests (before ``-m`` deselects by mark)."""
    slow = read_slow_list(SLOW_LIST)
    for item in items:
        if repo_test_id(config.rootpath, item.nodeid) in slow:
            item.add_marker("slow")


def pytest_runtest_logstart(nodeid: str) -> None:
    if os.environ.get(RECORD_ENV):
        _began[nodeid] = cpu_seconds()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    """On a recording run, once a test is torn down, the process that ran it (an xdist
    worker, or pytest itself) appends its CPU seconds, setup to teardown."""
    report = yield
    record = os.environ.get(RECORD_ENV)
    if record and call.when == "teardown" and item.nodeid in _began:
        seconds = cpu_seconds() - _began.pop(item.nodeid)
        line = json.dumps({"test": repo_test_id(item.config.rootpath, item.nodeid), "cpu_seconds": round(seconds, 2)})
        with open(record, "a", encoding="utf-8") as out:  # one short append a test: whole lines
            out.write(line + "\n")
    return report


def write_slow_list(records: Path, out: Path = SLOW_LIST, *, add: bool = False) -> None:
    """The list (``slow_tests.txt``) from a recording run's file: the tests at or past
    the threshold. With ``add``, the tests listed before stay: a second run of only the
    tests not yet listed charges a module's costly setup, paid in the first run by a
    test now left out, to the test that now pays it."""
    measured = read_slow_list(out) if add else {}
    for line in records.read_text(encoding="utf-8").splitlines():
        entry = json.loads(line)
        if entry["cpu_seconds"] >= SLOW_CPU_SECONDS or entry["test"] not in measured:
            measured[entry["test"]] = entry["cpu_seconds"]
    slow = sorted(test for test, seconds in measured.items() if seconds >= SLOW_CPU_SECONDS)
    header = [
        f"# Tests that took at least {SLOW_CPU_SECONDS:g} CPU seconds"
        " (`make slow-tests`; tests/support/slow_tests.py).",
        "# Each line: the test, its CPU seconds.",
    ]
    out.write_text("\n".join(header + [f"{test} {measured[test]:.1f}" for test in slow]) + "\n", encoding="utf-8")


if __name__ == "__main__":
    arguments = sys.argv[1:]
    write_slow_list(Path(arguments[0]), add="--add" in arguments)
