"""The checks every gate passes, in the spirit of scikit-learn's
``parametrize_with_checks``: a gate class that is registered (any ``Gate`` subclass
with a ``name``) is checked by the project's own suite, and a gate written outside it
can be checked the same way::

    from adaptive_gates.gates.base.conformance import check_gate

    check_gate(my_fitted_gate, ["Who wrote Hamlet?", "What did the memo say?"], tmp_path)

Each check takes a fitted gate, a few questions and a scratch directory, and raises
``AssertionError`` saying what broke. ``GATE_CHECKS`` lists them by name, for a test
parametrised over gates and checks.
"""

from __future__ import annotations

import ast
import asyncio
import inspect
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ...errors import InvalidQuestionError
from ...records.decision import GateDecision
from .gate import Gate

#: Scores of one question decided alone and inside a batch may differ by this much: a
#: batch pads its prompts, and the model's arithmetic over padding is not bit-identical.
BATCH_SCORE_TOLERANCE = 1e-3

Check = Callable[[Gate, Sequence[str], Path], None]


def check_params(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """``get_params`` holds every constructor parameter, and ``set_params`` of them
    changes nothing and keeps the gate fitted."""
    params = gate.get_params(deep=False)
    assert sorted(params) == sorted(gate.param_names()), f"get_params {sorted(params)} != the constructor's"
    assert gate.set_params(**params) is gate, "set_params returns the gate"
    assert gate.get_params(deep=False).keys() == params.keys() and gate.is_fitted, "set_params of its own params"


def check_clone(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """A clone has the same parameters, shares the backends, clones the member gates,
    and holds no fitted state or calibration."""
    copy = gate.__sklearn_clone__()
    assert type(copy) is type(gate) and copy is not gate, "a clone is a new gate of the same class"
    copied = copy.get_params(deep=False)
    for name, value in gate.get_params(deep=False).items():
        if name in gate.backend_params:
            assert copied[name] is value, f"a clone shares its backend {name!r}"
        elif name in gate.member_params:
            assert copied[name] is not value and type(copied[name]) is type(value), f"a clone clones member {name!r}"
        else:
            assert copied[name] == value, f"a clone keeps parameter {name!r}"
    assert copy.calibration_ is None, "a clone is not calibrated"


def check_save_load(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """A saved gate loads (with the backends it was built with) and decides as it did."""
    path = gate.save(scratch / f"{gate.name}-saved")
    loaded = Gate.load(path, **_backends(gate))
    assert type(loaded) is type(gate), f"loaded a {type(loaded).__name__}"
    batch = list(questions)
    _assert_same(gate, gate.decide_batch(batch), loaded.decide_batch(batch), "after save/load", 1e-9)


def check_sync_async(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """``adecide_batch`` and ``adecide`` give ``decide_batch``'s and ``decide``'s decisions."""
    batch = list(questions)
    _assert_same(gate, gate.decide_batch(batch), asyncio.run(gate.adecide_batch(batch)), "awaited batch", 1e-9)
    _assert_same(gate, [gate.decide(batch[0])], [asyncio.run(gate.adecide(batch[0]))], "awaited single", 1e-9)


def check_batch_single(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """Questions decided in one batch are decided as alone, scores within
    ``BATCH_SCORE_TOLERANCE``."""
    batch = list(questions)
    alone = [gate.decide(q) for q in batch]
    _assert_same(gate, gate.decide_batch(batch), alone, "one at a time", BATCH_SCORE_TOLERANCE)


#: Questions no gate may judge: empty, not a string, or with no visible character
#: (NUL, zero-width space, byte-order mark, word joiner).
BAD_QUESTIONS: tuple[object, ...] = ("", None, "   ", "\x00\x00", "\u200b\u200b", "\ufeff", "\u2060")


def check_bad_input(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """A bad question (``BAD_QUESTIONS``) gets the recorded fallback decision from
    ``decide``, ``decide_batch``, ``adecide`` and ``adecide_batch``, beside good ones
    decided as usual; a batch that is no batch raises ``InvalidQuestionError``."""
    bad = list(BAD_QUESTIONS)
    *refused, good = gate.decide_batch([*bad, questions[0]])  # type: ignore[list-item]  # bad on purpose
    assert not good.error or not good.error.startswith("invalid"), "a good question is judged"
    refused += asyncio.run(gate.adecide_batch(bad))  # type: ignore[arg-type]  # bad on purpose
    for question in bad:
        refused += [gate.decide(question), asyncio.run(gate.adecide(question))]  # type: ignore[arg-type]
    for decision in refused:
        what = f"{decision.question!r} is refused"
        assert decision.is_fallback and decision.retrieve is gate.fallback_retrieve, what
        assert decision.error is not None and decision.error.startswith("invalid question"), decision.error
    for not_a_batch in ("a question", None):
        try:
            gate.decide_batch(not_a_batch)  # type: ignore[arg-type]  # bad on purpose
        except InvalidQuestionError:
            continue
        raise AssertionError(f"decide_batch({not_a_batch!r}) did not raise InvalidQuestionError")


def check_no_private_reads(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """The gate's class reads no private attribute of another object (``x._name`` with
    ``x`` other than ``self``/``cls``): it works through its backends' public API."""
    source = inspect.getsource(inspect.getmodule(type(gate)))  # type: ignore[arg-type]  # a class has a module
    reads = [
        f"{node.value.id}.{node.attr} (line {node.lineno})"
        for node in ast.walk(ast.parse(source))
        if isinstance(node, ast.Attribute)
        and node.attr.startswith("_")
        and not node.attr.startswith("__")
        and isinstance(node.value, ast.Name)
        and node.value.id not in ("self", "cls", "type", "super")
        and not node.value.id[0].isupper()  # a class's own constants and the module's classes
    ]
    assert not reads, f"{type(gate).__module__} reads private attributes of other objects: {reads}"


#: Every check, by name.
GATE_CHECKS: dict[str, Check] = {
    "params": check_params,
    "clone": check_clone,
    "save_load": check_save_load,
    "sync_async": check_sync_async,
    "batch_single": check_batch_single,
    "bad_input": check_bad_input,
    "no_private_reads": check_no_private_reads,
}


def check_gate(gate: Gate, questions: Sequence[str], scratch: Path) -> None:
    """Run every check of ``GATE_CHECKS`` on the fitted ``gate``."""
    if len(questions) < 2:
        raise ValueError("check_gate needs at least two questions")
    for check in GATE_CHECKS.values():
        check(gate, questions, scratch)


def _backends(gate: Gate) -> dict[str, Any]:
    """The backends ``gate`` and its members were built with, to load it again."""
    params = gate.get_params(deep=False)
    found = {name: params[name] for name in gate.backend_params if params[name] is not None}
    for name in gate.member_params:
        found = {**_backends(params[name]), **found}
    return found


def _assert_same(
    gate: Gate, expected: Sequence[GateDecision], got: Sequence[GateDecision], how: str, tolerance: float
) -> None:
    """The same decisions: scores within ``tolerance``, errors equal, and verdicts equal
    unless the gate decides by its history (then the score alone must repeat)."""
    assert len(expected) == len(got), f"{how}: {len(got)} decisions for {len(expected)} questions"
    for a, b in zip(expected, got):
        same_score = (math.isnan(a.score) and math.isnan(b.score)) or math.isclose(a.score, b.score, abs_tol=tolerance)
        same_verdict = a.retrieve == b.retrieve or gate.decides_by_history
        assert same_score and same_verdict and a.error == b.error, (
            f"{how}: {a.question!r} decided {b.retrieve} at {b.score} ({b.error}), "
            f"not {a.retrieve} at {a.score} ({a.error})"
        )
