"""The ``slow`` mark from measured CPU time (``support/slow_tests.py``), shown on a small suite
run by pytest-xdist in its own process: a recording run measures each test, the list is
written from it, and ``-m "not slow"`` then leaves out the listed test only."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from support.slow_tests import RECORD_ENV, SLOW_CPU_SECONDS, write_slow_list

TESTS = Path(__file__).resolve().parents[1]
PASSED = re.compile(r"PASSED tests/test_work\.py::(\w+)")
SUITE = f"""
import time


def test_busy():
    end = time.process_time() + {SLOW_CPU_SECONDS + 0.5}
    while time.process_time() < end:
        pass


def test_quick():
    pass
"""


def _pytest(suite: Path, *args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-v",
            "-p",
            "xdist.plugin",
            "-n",
            "2",
            "-p",
            "no:cacheprovider",
            *args,
            "tests",
        ],
        cwd=suite,
        # this suite's own recording run (if any) is not the small suite's; of the pytest
        # plugins installed, it loads xdist alone (the others import for seconds in each process)
        env={
            **{k: v for k, v in os.environ.items() if k != RECORD_ENV},
            "PYTHONPATH": str(TESTS),
            "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1",
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def test_a_recorded_run_lists_the_busy_test_and_the_fast_loop_leaves_it_out(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow: measured slow\n")
    (tmp_path / "tests").mkdir()
    listed = tmp_path / "slow_tests.txt"
    (tmp_path / "tests" / "conftest.py").write_text(
        "from pathlib import Path\n\n"
        "from support import slow_tests\n"
        "from support.fixture_marks import pytest_collection_modifyitems  # noqa: F401\n"
        "from support.slow_tests import pytest_runtest_logstart, pytest_runtest_makereport  # noqa: F401\n\n"
        f"slow_tests.SLOW_LIST = Path({str(listed)!r})\n"
    )
    (tmp_path / "tests" / "test_work.py").write_text(SUITE)
    records = tmp_path / "cpu.jsonl"

    recorded = _pytest(tmp_path, env={RECORD_ENV: str(records)})
    assert sorted(PASSED.findall(recorded.stdout)) == ["test_busy", "test_quick"]
    measured = {json.loads(line)["test"]: json.loads(line)["cpu_seconds"] for line in records.read_text().splitlines()}
    busy, quick = (f"{(tmp_path / 'tests' / 'test_work.py').resolve().as_posix()}::test_{n}" for n in ("busy", "quick"))
    assert set(measured) == {busy, quick}
    assert measured[busy] >= SLOW_CPU_SECONDS + 0.5 > 0.5 > measured[quick]

    write_slow_list(records, listed)
    assert [line.rsplit(" ", 1)[0] for line in listed.read_text().splitlines() if not line.startswith("#")] == [busy]

    fast = _pytest(tmp_path, "-m", "not slow", env={})
    assert PASSED.findall(fast.stdout) == ["test_quick"], fast.stdout


def test_a_second_run_adds_to_the_list_and_keeps_what_it_did_not_measure(tmp_path):
    listed, records = tmp_path / "slow_tests.txt", tmp_path / "cpu.jsonl"
    records.write_text('{"test": "t.py::a", "cpu_seconds": 9.0}\n{"test": "t.py::b", "cpu_seconds": 0.1}\n')
    write_slow_list(records, listed)
    # b now pays the setup a paid; a is not measured again (left out as slow)
    records.write_text('{"test": "t.py::b", "cpu_seconds": 8.0}\n{"test": "t.py::c", "cpu_seconds": 0.2}\n')
    write_slow_list(records, listed, add=True)
    assert [line for line in listed.read_text().splitlines() if not line.startswith("#")] == [
        "t.py::a 9.0",
        "t.py::b 8.0",
    ]
    write_slow_list(records, listed)  # without add, the list is the new run's alone
    assert [line for line in listed.read_text().splitlines() if not line.startswith("#")] == ["t.py::b 8.0"]
