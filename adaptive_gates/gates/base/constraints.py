"""What a gate's constructor parameters must be, declared once per class.

A gate class lists its parameters' constraints in ``_parameter_constraints`` (as
scikit-learn's estimators do): a parameter's name maps to a constraint, or to a list
of alternatives in which ``None`` stands for the value ``None``. ``validate_params``
checks values against such a table. Each constraint describes itself, so a refused
value reads like ``"n_init must be a positive integer, got 0"``, and says which
exception it raises (``ValueError`` unless given ``error=TypeError``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Literal


class Constraint:
    """What a value must be: ``is_satisfied_by`` tells, ``str`` completes
    "<parameter> must be ...", and ``error`` is the exception a refused value raises."""

    def __init__(self, *, error: type[Exception] = ValueError) -> None:
        self.error = error

    def is_satisfied_by(self, value: object) -> bool:
        raise NotImplementedError

    def __str__(self) -> str:
        raise NotImplementedError


class OneOf(Constraint):
    """One of the given values."""

    def __init__(self, *values: object, error: type[Exception] = ValueError) -> None:
        super().__init__(error=error)
        self.values = values

    def is_satisfied_by(self, value: object) -> bool:
        return value in self.values

    def __str__(self) -> str:
        if len(self.values) == 1:
            return repr(self.values[0])
        return "one of " + ", ".join(map(repr, self.values))


#: The bounds of every integer parameter: a 64-bit integer, what numpy and faiss take.
#: A larger one (``k = 10**400`` in a hand-edited saved gate) is no setting at all.
INTEGER_LIMIT = 2**63 - 1


class Integer(Constraint):
    """An int (a bool is refused) in ``[low, high]``; a bound left ``None`` is open up
    to ``INTEGER_LIMIT`` (and down to ``-INTEGER_LIMIT``)."""

    def __init__(self, low: int | None = None, high: int | None = None, *, error: type[Exception] = ValueError) -> None:
        super().__init__(error=error)
        self.low, self.high = low, high

    def is_satisfied_by(self, value: object) -> bool:
        return (
            isinstance(value, int)
            and not isinstance(value, bool)
            and (value >= -INTEGER_LIMIT if self.low is None else value >= self.low)
            and (value <= INTEGER_LIMIT if self.high is None else value <= self.high)
        )

    def __str__(self) -> str:
        if self.high is not None:
            return f"an integer <= {self.high}" if self.low is None else f"an integer in [{self.low}, {self.high}]"
        if self.low is None:
            return "an integer of 64 bits"
        return f"{'a positive integer' if self.low == 1 else f'an integer >= {self.low}'} (at most 2**63 - 1)"


class Real(Constraint):
    """A finite int or float (bools, NaN and infinities are refused) between ``low``
    and ``high``; ``closed`` says which of the bounds given are included."""

    def __init__(
        self,
        low: float | None = None,
        high: float | None = None,
        *,
        closed: Literal["both", "left", "right", "neither"] = "both",
        error: type[Exception] = ValueError,
    ) -> None:
        super().__init__(error=error)
        self.low, self.high = low, high
        self.left, self.right = closed in ("both", "left"), closed in ("both", "right")

    def is_satisfied_by(self, value: object) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if isinstance(value, float) and not math.isfinite(value):  # an int always is
            return False
        above = self.low is None or (value >= self.low if self.left else value > self.low)
        below = self.high is None or (value <= self.high if self.right else value < self.high)
        return above and below

    def __str__(self) -> str:
        if self.low is None and self.high is None:
            return "a finite number"
        if self.high is None:
            if self.low == 0 and not self.left:
                return "a positive number"
            return f"a number {'>=' if self.left else '>'} {self.low}"
        if self.low is None:
            return f"a number {'<=' if self.right else '<'} {self.high}"
        return f"a number in {'[' if self.left else '('}{self.low}, {self.high}{']' if self.right else ')'}"


class Boolean(Constraint):
    """``True`` or ``False`` (not 0, 1 or another truthy value)."""

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, bool)

    def __str__(self) -> str:
        return "True or False"


class InstanceOf(Constraint):
    """An instance of a class, an ABC or a runtime-checkable ``Protocol``."""

    def __init__(self, kind: type, *, error: type[Exception] = ValueError) -> None:
        super().__init__(error=error)
        self.kind = kind

    def is_satisfied_by(self, value: object) -> bool:
        return isinstance(value, self.kind)

    def __str__(self) -> str:
        name = self.kind.__name__
        return f"{'an' if name[0] in 'AEIOUaeiou' else 'a'} {name}"


class Callable(Constraint):
    """Anything callable (a function, a class)."""

    def is_satisfied_by(self, value: object) -> bool:
        return callable(value)

    def __str__(self) -> str:
        return "a callable"


class Text(Constraint):
    """A string that is not blank; with ``slot``, a prompt template holding ``{slot}``
    for ``prompts.fill``."""

    def __init__(self, slot: str | None = None, *, error: type[Exception] = ValueError) -> None:
        super().__init__(error=error)
        self.slot = slot

    def is_satisfied_by(self, value: object) -> bool:
        if not isinstance(value, str):
            return False
        return bool(value.strip()) if self.slot is None else "{" + self.slot + "}" in value

    def __str__(self) -> str:
        return "a non-empty str" if self.slot is None else f"a str with a {{{self.slot}}} slot"


def validate_params(params: Mapping[str, Any], constraints: Mapping[str, Any]) -> None:
    """Raise for the first of ``params`` whose value meets none of its entry's
    alternatives in ``constraints`` (a parameter without an entry is not checked).

    The exception is ``TypeError`` when every constraint of the entry says so, else
    ``ValueError``; its message names the parameter, what it must be and the value."""
    for name, value in params.items():
        if name not in constraints:
            continue
        entry = constraints[name]
        options = entry if isinstance(entry, list) else [entry]
        if any(value is None if option is None else option.is_satisfied_by(value) for option in options):
            continue
        rules = [option for option in options if option is not None]
        error = TypeError if all(rule.error is TypeError for rule in rules) else ValueError
        described = [str(option) for option in options]
        either = described[0] if len(described) == 1 else ", ".join(described[:-1]) + " or " + described[-1]
        raise error(f"{name} must be {either}, got {value!r}")
