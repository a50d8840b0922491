"""Marks that follow fixtures: a test that uses a fixture declared with ``marks_users``
(directly or through another fixture) carries the fixture's marks, so selecting by mark
(``-m``) never misses a test because its author forgot the mark.

The conftests import ``pytest_collection_modifyitems`` by name; it also marks the
measured slow tests ``slow`` (``slow_tests``) and puts the slowest test modules first
(``scheduling``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

import pytest

from support.scheduling import slowest_first
from support.slow_tests import mark_slow

_F = TypeVar("_F", bound=Callable[..., Any])
#: The declared fixtures (their functions, not their names: a test's parameter or
#: another module's fixture may share a name) and their marks.
_MARKS_OF_FIXTURE: dict[Callable[..., Any], set[str]] = {}


def marks_users(*marks: str) -> Callable[[_F], _F]:
    """Declare (under ``@pytest.fixture``) that every test using this fixture carries ``marks``."""

    def declare(fixture_function: _F) -> _F:
        _MARKS_OF_FIXTURE.setdefault(fixture_function, set()).update(marks)
        return fixture_function

    return declare


def _marks_of_fixtures(item: pytest.Item) -> set[str]:
    """The marks declared on the fixtures ``item`` uses, directly or through others."""
    info = getattr(item, "_fixtureinfo", None)
    if info is None:
        return set()
    return {
        mark
        for definitions in info.name2fixturedefs.values()
        for definition in definitions
        for mark in _MARKS_OF_FIXTURE.get(definition.func, ())
    }


@pytest.hookimpl(tryfirst=True)  # before ``-m`` deselects by mark
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    mark_slow(config, items)
    for item in items:
        for mark in _marks_of_fixtures(item):
            if item.get_closest_marker(mark) is None:
                item.add_marker(mark)
    slowest_first(items)
