"""The constraint vocabulary of the gates' parameter tables, and the one place a gate
checks its arguments against its table."""

import math
from collections.abc import Mapping

import pytest

from adaptive_gates import PopularityGate, SKRClassifierGate, SKRIclGate, ThrustGate
from adaptive_gates.gates.base.constraints import (
    Boolean,
    Callable,
    InstanceOf,
    Integer,
    OneOf,
    Real,
    Text,
    validate_params,
)


@pytest.mark.parametrize(
    "constraint, good, bad, described",
    [
        (OneOf("a", "b"), ["a", "b"], ["c", None], "one of 'a', 'b'"),
        (OneOf("balanced"), ["balanced"], ["Balanced"], "'balanced'"),
        (Integer(), [0, -3, 2**63 - 1], [True, 1.0, "1", 2**63, -(10**30)], "an integer of 64 bits"),
        (Integer(1), [1, 7], [0, True, 2.0, 10**400], "a positive integer (at most 2**63 - 1)"),
        (Integer(2), [2], [1], "an integer >= 2 (at most 2**63 - 1)"),
        (Integer(0, 3), [0, 3], [-1, 4], "an integer in [0, 3]"),
        (Real(), [0, -1.5, 10**400], [math.nan, math.inf, True, "1"], "a finite number"),
        (Real(0, closed="neither"), [1e-9, 5], [0, -1, math.inf], "a positive number"),
        (Real(0, 1), [0, 1, 0.5], [-0.1, 1.1, False], "a number in [0, 1]"),
        (Real(0, 1, closed="right"), [1, 0.5], [0], "a number in (0, 1]"),
        (Boolean(), [True, False], [0, 1, "true"], "True or False"),
        (InstanceOf(Mapping), [{}], [[]], "a Mapping"),
        (InstanceOf(int), [1], ["1"], "an int"),
        (Callable(), [len, int], ["len"], "a callable"),
        (Text(), ["x"], ["", "  ", 1], "a non-empty str"),
        (Text("question"), ["Q: {question}"], ["Q:", None], "a str with a {question} slot"),
    ],
)
def test_each_constraint_takes_refuses_and_describes(constraint, good, bad, described):
    assert all(constraint.is_satisfied_by(v) for v in good)
    assert not any(constraint.is_satisfied_by(v) for v in bad)
    assert str(constraint) == described


def test_a_refusal_names_the_parameter_what_it_must_be_and_the_value():
    table = {"n": [Integer(1), None], "flag": Boolean(error=TypeError), "mode": [OneOf("x"), Boolean(), None]}
    validate_params({"n": None, "flag": True, "other": object()}, table)  # no entry: not checked
    with pytest.raises(ValueError, match=r"^n must be a positive integer \(at most 2\*\*63 - 1\) or None, got 0$"):
        validate_params({"n": 0}, table)
    with pytest.raises(TypeError, match=r"^flag must be True or False, got 'yes'$"):
        validate_params({"flag": "yes"}, table)
    with pytest.raises(ValueError, match=r"^mode must be 'x', True or False or None, got 3$"):
        validate_params({"mode": 3}, table)


def test_a_gate_checks_the_tables_of_its_class_and_bases_at_construction_and_set_params():
    with pytest.raises(TypeError, match="fallback_retrieve must be True or False, got 1"):  # Gate's table
        ThrustGate(fallback_retrieve=1)
    with pytest.raises(ValueError, match="memory must be a callable or None, got 'exact'"):  # a base's
        SKRClassifierGate(memory="exact")
    with pytest.raises(ValueError, match="known_reply must be one of 'yes', 'no', got 'maybe'"):  # a mixin's
        SKRIclGate(known_reply="maybe")
    with pytest.raises(ValueError, match=r"deadline must be a number in \(0, 86400.0\] or None, got 0"):  # chat backend
        SKRIclGate(deadline=0)
    with pytest.raises(ValueError, match="n_demos must be an even number >= 2, got 3"):  # _check_params
        SKRIclGate(n_demos=3)
    gate = PopularityGate(rule="mean")
    with pytest.raises(ValueError, match=r"rule must be one of 'min', .*, got 'max'"):
        gate.set_params(rule="max")
    assert gate.rule == "mean"


def test_a_subclass_without_a_constructor_is_checked_too():
    class Quiet(PopularityGate):
        pass

    with pytest.raises(ValueError, match="rule must be one of"):
        Quiet(rule="max")
