"""The order in which ``make test`` hands out modules to its xdist workers
(``support/scheduling.py``), shown on a small suite run by pytest-xdist in its own process."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REPORTED = re.compile(r"^\[(gw\d)\] \[\s*\d+%\] PASSED (tests/\S+)::", re.M)


def _module(tests: int) -> str:
    return "".join(f"def test_{i}():\n    pass\n\n\n" for i in range(tests))


def test_modules_go_out_slowest_first_and_the_question_pool_modules_to_one_worker(tmp_path):
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests" / "conftest.py").write_text(
        "from support.fixture_marks import pytest_collection_modifyitems  # noqa: F401\n"
        "from support.scheduling import pytest_xdist_make_scheduler  # noqa: F401\n"
    )
    sizes = {
        "test_many.py": 6,  # not among the slowest: xdist alone would hand it out first
        "project/test_demo.py": 1,  # among the slowest
        "gates/test_skr.py": 1,  # the question pool's modules
        "gates/test_thrust.py": 2,
        "memory/test_faiss_index.py": 1,
    }
    for name, tests in sizes.items():
        (tmp_path / "tests" / name).parent.mkdir(exist_ok=True)
        (tmp_path / "tests" / name).write_text(_module(tests))
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-v", "-n", "2", "--dist", "loadscope", "-p", "no:cacheprovider", "tests"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    reports = REPORTED.findall(done.stdout)
    assert len(reports) == sum(sizes.values()), done.stdout
    worker_of = {}
    for worker, path in reports:
        worker_of.setdefault(path, set()).add(worker)
    pool = worker_of["tests/gates/test_skr.py"] | worker_of["tests/gates/test_thrust.py"]
    assert len(pool | worker_of["tests/memory/test_faiss_index.py"]) == 1  # one worker embeds the pool
    order = [path for _, path in reports]
    # the one-test module among the slowest starts before the six-test module
    assert order.index("tests/project/test_demo.py") < order.index("tests/test_many.py")
