"""The old import paths: each gives the module at its new place, with a warning."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

import adaptive_gates
from adaptive_gates.moved import MODULES, NAMES, install, moved_attribute


def _forget_old_paths() -> dict[tuple[str, str], object]:
    """Take the old paths out of ``sys.modules`` and off their parent packages, so an
    import goes through the finder again; what was taken off, to put back."""
    taken: dict[tuple[str, str], object] = {}
    for old in MODULES:
        sys.modules.pop(f"adaptive_gates.{old}", None)
        parent, _, child = f"adaptive_gates.{old}".rpartition(".")
        if parent in sys.modules and child in vars(sys.modules[parent]):
            taken[parent, child] = vars(sys.modules[parent]).pop(child)
    return taken


@pytest.fixture
def fresh_old_paths():
    """The old paths forgotten for the test (a module imported once is not looked for
    twice), as they were afterwards."""
    modules = dict(sys.modules)
    taken = _forget_old_paths()
    yield
    _forget_old_paths()
    sys.modules.update(modules)
    for (parent, child), value in taken.items():
        setattr(sys.modules[parent], child, value)


@pytest.mark.parametrize("old", sorted(MODULES))
def test_an_old_path_gives_the_new_module_with_a_warning(old, fresh_old_paths):
    new = f"adaptive_gates.{MODULES[old]}"
    module = importlib.import_module(new)
    with pytest.warns(DeprecationWarning, match=rf"adaptive_gates\.{old} moved to {new};"):
        aliased = importlib.import_module(f"adaptive_gates.{old}")
    assert aliased is module
    # the module keeps its own name and spec: relative imports and reload still work
    assert module.__name__ == new
    assert module.__spec__.name == new


def test_the_from_import_form_works_and_warns(fresh_old_paths):
    from adaptive_gates.records import data

    with pytest.warns(DeprecationWarning, match=r"adaptive_gates\.data moved to adaptive_gates\.records\.data"):
        from adaptive_gates import data as old  # type: ignore[attr-defined]
    assert old is data


def test_reload_after_an_old_import_keeps_the_new_path(fresh_old_paths):
    module = importlib.import_module("adaptive_gates.records.validation")
    with pytest.warns(DeprecationWarning):
        importlib.import_module("adaptive_gates.validation")
    reloaded = importlib.reload(module)
    assert reloaded.__name__ == "adaptive_gates.records.validation"
    assert sys.modules["adaptive_gates.records.validation"] is reloaded


def test_every_new_path_is_a_module_of_the_package():
    for old, new in MODULES.items():
        assert old != new
        assert importlib.util.find_spec(f"adaptive_gates.{new}") is not None, new


@pytest.mark.parametrize(("package", "name"), sorted(NAMES))
def test_a_moved_name_is_found_through_its_old_package(package, name):
    new_module = importlib.import_module(f"adaptive_gates.{NAMES[package, name]}")
    old_package = importlib.import_module(f"adaptive_gates.{package}")
    with pytest.warns(DeprecationWarning, match=rf"adaptive_gates\.{package}\.{name} moved to"):
        found = getattr(old_package, name)
    assert found is getattr(new_module, name)
    with pytest.warns(DeprecationWarning):
        assert moved_attribute(f"adaptive_gates.{package}", name) is found


def test_an_unknown_name_raises_attribute_error():
    with pytest.raises(AttributeError, match=r"'adaptive_gates\.memory' has no attribute 'NoSuchThing'"):
        moved_attribute("adaptive_gates.memory", "NoSuchThing")
    with pytest.raises(AttributeError, match="NoSuchGate"):
        adaptive_gates.gates.NoSuchGate  # noqa: B018
    # a moved name is only found through the package it left
    with pytest.raises(AttributeError):
        moved_attribute("adaptive_gates.gates", "MilvusMemory")


def test_an_unknown_old_path_is_not_found():
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("adaptive_gates.no_such_module")


def test_install_adds_one_finder_however_often_called():
    def count():
        return sum(type(finder).__module__ == "adaptive_gates.moved.paths" for finder in sys.meta_path)

    assert count() == 1  # the package installed it on import
    install()
    install()
    assert count() == 1
