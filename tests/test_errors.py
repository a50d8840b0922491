"""One exception tree: every exception the package defines is an ``AdaptiveGatesError``
defined in ``adaptive_gates.errors``, so a caller catches the package's errors at one
place and finds them all at one place."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import warnings

import pytest

import adaptive_gates
from adaptive_gates import errors
from adaptive_gates.errors import AdaptiveGatesError


def _modules() -> list[str]:
    names = []
    for info in pkgutil.walk_packages(adaptive_gates.__path__, "adaptive_gates."):
        if info.name.rpartition(".")[2] == "__main__":
            continue  # runs the command line
        names.append(info.name)
    return names


def _defined_exceptions() -> tuple[dict[str, type[BaseException]], list[str]]:
    """Every exception class a module of the package defines, by its qualified name
    (warnings aside: they are not raised), and the modules read."""
    found: dict[str, type[BaseException]] = {}
    read = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for name in _modules():
            try:
                module = importlib.import_module(name)
            except ImportError as exc:  # an optional extra that is not installed
                if (exc.name or "").startswith("adaptive_gates"):
                    raise
                continue
            read.append(name)
            for value in vars(module).values():
                if (
                    inspect.isclass(value)
                    and issubclass(value, Exception)
                    and not issubclass(value, Warning)
                    and value.__module__.startswith("adaptive_gates")
                    and not value.__name__.startswith("_")
                ):
                    found[f"{value.__module__}.{value.__qualname__}"] = value
    return found, read


def test_every_exception_of_the_package_is_an_adaptive_gates_error_in_errors():
    found, read = _defined_exceptions()
    assert {"adaptive_gates.serve.service", "adaptive_gates.models.embedding.st_folder"} <= set(read)
    assert len(read) > 100  # the walk reached the package's modules
    outside = sorted(name for name, cls in found.items() if cls.__module__ != "adaptive_gates.errors")
    assert outside == [], f"defined outside adaptive_gates.errors: {outside}"
    stray = sorted(name for name, cls in found.items() if not issubclass(cls, AdaptiveGatesError))
    assert stray == [], f"not under AdaptiveGatesError: {stray}"


@pytest.mark.parametrize(
    "error, builtin",
    [
        (errors.UnknownDecisionError, KeyError),
        (errors.UnknownLessonError, KeyError),
        (errors.ConversationTooLongError, ValueError),
        (errors.UnsupportedFolderError, ValueError),
        (errors.FeedbackNotSupportedError, NotImplementedError),
        (errors.ExportMismatchError, RuntimeError),
        (errors.AlreadyJudgedError, errors.FeedbackRefusedError),
    ],
)
def test_the_moved_errors_keep_the_builtins_they_are_caught_as(error, builtin):
    assert issubclass(error, AdaptiveGatesError) and issubclass(error, builtin)


def test_the_former_homes_still_give_the_same_classes():
    from adaptive_gates.gates.base import feedback
    from adaptive_gates.models.embedding import st_folder
    from adaptive_gates.models.embedding.onnx import export
    from adaptive_gates.serve import limits, service

    assert service.UpstreamError is errors.UpstreamError
    assert service.FeedbackRefusedError is errors.FeedbackRefusedError
    assert service.MemoryUnavailableError is errors.MemoryUnavailableError
    assert limits.ConversationTooLongError is errors.ConversationTooLongError
    assert st_folder.UnsupportedFolder is errors.UnsupportedFolderError
    assert export.ExportMismatch is errors.ExportMismatchError
    assert feedback.FeedbackNotSupportedError is errors.FeedbackNotSupportedError
