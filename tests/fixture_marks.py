"""Marks that follow fixtures: a test that uses a fixture declared with ``marks_users``
(directly or through another fixture) carries the fixture's marks, so selecting by mark
(``-m``) never misses a test because its author forgot the mark.

The conftests import ``pytest_collection_modifyitems`` by name; it also puts the
slowest test modules first (``scheduling``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from scheduling import slowest_first

_F = TypeVar("_F", bound=Callable[..., Any])
_MARKS_OF_FIXTURE: dict[str, set[str]] = {}


def marks_users(*marks: str) -> Callable[[_F], _F]:
    """Declare (under ``@pytest.fixture``) that every test using this fixture carries ``marks``."""

    def declare(fixture_function: _F) -> _F:
        _MARKS_OF_FIXTURE.setdefault(fixture_function.__name__, set()).update(marks)
        return fixture_function

    return declare


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for name in _MARKS_OF_FIXTURE.keys() & set(getattr(item, "fixturenames", ())):
            for mark in _MARKS_OF_FIXTURE[name]:
                if item.get_closest_marker(mark) is None:
                    item.add_marker(mark)
    slowest_first(items)
