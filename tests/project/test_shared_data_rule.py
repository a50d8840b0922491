"""The rule behind CI's second pass (``support/shared_data.py``): a test that reaches the shared
data folder without the ``shared_data`` mark fails, so the pass without the folder can
run the marked tests alone. Checked in a pytest run of its own over a stand-in folder."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

CONFTEST = """
from support.fixture_marks import pytest_collection_modifyitems  # noqa: F401
from support.shared_data import pytest_runtest_call, pytest_runtest_setup, pytest_runtest_teardown  # noqa: F401
"""

CASES = """
import os, subprocess, sys
from pathlib import Path

import pytest
from support.shared_data import ENV, SHARED_DATA, reads_shared_data

@pytest.fixture(scope="module")
@reads_shared_data
def rows():
    return (SHARED_DATA / "rows.jsonl").read_text()

def test_fixture_marks_its_users(rows):
    assert rows == "real\\n"

@pytest.mark.shared_data
def test_marked_reads():
    assert (SHARED_DATA / "rows.jsonl").read_text() == "real\\n"

def test_unmarked_read():
    (SHARED_DATA / "rows.jsonl").read_text()

def test_unmarked_listing_caught_by_the_test():
    try:
        os.listdir(SHARED_DATA)
    except Exception:
        pass

def test_unmarked_subprocess_naming_the_folder():
    subprocess.run([sys.executable, "-c", "pass", str(SHARED_DATA / "rows.jsonl")], check=True)

def test_unmarked_subprocess_sees_no_folder():
    seen = subprocess.run(
        [sys.executable, "-c", f"import os; print(os.path.isdir(os.environ[{ENV!r}]))"],
        capture_output=True, text=True, check=True,
    ).stdout
    assert seen == "False\\n"

def test_unmarked_without_reading():
    assert Path("elsewhere.txt").write_text("x") == 1
"""


def _pytest(tmp_path: Path, *args: str) -> str:
    """Run pytest over the cases with ``tmp_path / "shared"`` as the shared folder."""
    (tmp_path / "shared").mkdir(exist_ok=True)
    (tmp_path / "shared" / "rows.jsonl").write_text("real\n")
    (tmp_path / "conftest.py").write_text(textwrap.dedent(CONFTEST))
    (tmp_path / "test_cases.py").write_text(textwrap.dedent(CASES))
    env = {**os.environ, "ADAPTIVE_GATES_SHARED_DATA": str(tmp_path / "shared"), "PYTHONPATH": str(TESTS)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rA", "-o", "addopts=", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    return done.stdout


def test_reaching_the_folder_without_the_mark_fails(tmp_path: Path) -> None:
    out = _pytest(tmp_path)
    summary = [line.split()[:2] for line in out.splitlines() if line.startswith(("PASSED ", "FAILED "))]
    outcomes = {test.split("::")[1]: outcome for outcome, test in summary}
    assert outcomes == {
        "test_fixture_marks_its_users": "PASSED",
        "test_marked_reads": "PASSED",
        "test_unmarked_read": "FAILED",
        "test_unmarked_listing_caught_by_the_test": "FAILED",
        "test_unmarked_subprocess_naming_the_folder": "FAILED",
        "test_unmarked_subprocess_sees_no_folder": "PASSED",
        "test_unmarked_without_reading": "PASSED",
    }, out
    assert "test_cases.py::test_unmarked_read reads " in out and "without @pytest.mark.shared_data" in out
    assert "(os.listdir)" in out and "(subprocess.Popen)" in out


def test_the_mark_selects_the_tests_that_read_the_folder(tmp_path: Path) -> None:
    out = _pytest(tmp_path, "-m", "shared_data")
    assert "2 passed, 5 deselected" in out, out
