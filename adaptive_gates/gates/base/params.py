"""scikit-learn's parameter conventions for gates, as the functions ``Gate``'s methods
call, kept by duck typing: every gate answers ``get_params`` and ``set_params``,
``sklearn.base.clone`` (``__sklearn_clone__``) and ``check_is_fitted``
(``__sklearn_is_fitted__``, ``__sklearn_tags__``) as an estimator does, without deriving
from ``BaseEstimator``, so importing the package loads no scikit-learn and a gate shows
none of scikit-learn's own machinery (metadata routing).

A gate's ``__init__`` keeps every argument as-is under its own name, so the
parameters are read back from its signature, as ``BaseEstimator`` does. What each
parameter must be is declared in a table per class (``_parameter_constraints``, as
scikit-learn's estimators declare theirs; the vocabulary is ``constraints``), checked
once per construction by the constructor marked ``@validating``, so also by
``set_params`` and clone. Objects a gate builds from its parameters (a chat backend,
an estimator) are built on first use (``_built_once``), never in ``__init__``.

``set_params`` on a gate that holds fitted state (a memory, clusters, a calibrated
threshold): that state was learned under the old parameters, so keeping it would
silently mix two settings. Changing only the gate's *serving* parameters (what it
does when a backend fails, how it waits on one: ``_serving_params``) keeps it; any
other change returns the gate to its unfitted state, with a warning, and it must be
fitted (or calibrated) again. A clone shares its backends (models hold no fitted
state of the gate, and copying one would copy the model), clones its member gates (a
cascade's stages, a budget's gate: unfitted, as it is) and copies the rest.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
from collections.abc import Callable
from typing import Any, TypeVar

from .constraints import validate_params

logger = logging.getLogger(__name__)

# The functions take the gate (or its class) as ``Any``: ``Gate`` calls them, and a
# type of it here would make an import cycle (``base`` imports this module).

T = TypeVar("T")

#: Values a clone copies; anything else (a model, an embedder) is a backend it shares.
_PLAIN = (str, int, float, bool, type(None), list, tuple, dict)


def _same(new: Any, old: Any) -> bool:
    """Whether a parameter set to ``new`` keeps its value ``old``: the same object, or an
    equal plain value of the same type."""
    return new is old or (isinstance(new, _PLAIN) and type(new) is type(old) and new == old)


def validating(init: Callable[..., None]) -> Callable[..., None]:
    """Mark a gate constructor: it first checks its arguments (``check_arguments``) when
    it is the one called, not a subclass's ``super().__init__``: once per gate, before
    any state is built from a refused value."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        if type(self).__init__ is __init__:
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:
                pass  # a call that does not fit: the constructor says so in Python's words
            else:
                bound.apply_defaults()
                check_arguments(type(self), {k: v for k, v in bound.arguments.items() if k != "self"})
        init(self, *args, **kwargs)

    return __init__


def check_arguments(cls: Any, params: dict[str, Any]) -> None:
    """Refuse constructor arguments that break the tables of ``cls`` and its bases, then
    those its ``_check_params`` refuses. Every constructor calls it (``set_params`` and
    ``clone`` construct too)."""
    tables = (vars(klass).get("_parameter_constraints", {}) for klass in reversed(cls.__mro__))
    validate_params(params, {name: entry for table in tables for name, entry in table.items()})
    cls._check_params(params)


def param_names(cls: Any) -> list[str]:
    """The constructor parameters, in signature order (``*args``/``**kwargs`` are
    refused, as scikit-learn refuses them)."""
    signature = inspect.signature(cls.__init__)
    for p in signature.parameters.values():
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
            raise TypeError(f"{cls.__name__}.__init__ must not take *args or **kwargs (scikit-learn convention)")
    return [name for name in signature.parameters if name != "self"]


def params_of(gate: Any, deep: bool) -> dict[str, Any]:
    """The constructor parameters by name, as given; ``deep`` adds a nested one's own
    (``name__param``) for a parameter that has ``get_params``, as scikit-learn does."""
    params = {name: getattr(gate, name) for name in gate.param_names()}
    if deep:
        for name, value in list(params.items()):
            if callable(getattr(value, "get_params", None)) and not isinstance(value, type):
                params.update({f"{name}__{key}": nested for key, nested in value.get_params().items()})
    return params


def set_params_of(gate: Any, params: dict[str, Any]) -> None:
    """Set ``gate``'s constructor parameters (``name__param`` reaches a nested one), each
    validated as the constructor does before anything changes; its fitted state is kept
    or dropped as the module says."""
    names = gate.param_names()
    own: dict[str, Any] = {}
    for key, value in params.items():
        name, _, sub = key.partition("__")
        if name not in names:
            raise ValueError(f"invalid parameter {name!r} for {type(gate).__name__}; valid ones: {names}")
        if sub:
            nested = getattr(gate, name)
            if not callable(getattr(nested, "set_params", None)):
                raise ValueError(f"parameter {name!r} of {type(gate).__name__} has no set_params for {key!r}")
            nested.set_params(**{sub: value})
        else:
            own[name] = value
    current = gate.get_params(deep=False)
    fresh = type(gate)(**{**current, **own})  # validates, unfitted
    changed = {name for name, value in own.items() if not _same(value, current[name])}
    kept = {}
    if changed <= gate._serving_params:
        kept = {name: gate.__dict__[name] for name in _fitted_state(type(gate)) if name in gate.__dict__}
    elif any(gate.__dict__.get(name) is not None for name in _fitted_state(type(gate))):
        logger.warning(
            "%s.set_params(%s): its fitted state and calibration belong to the old parameters and "
            "were dropped; fit (or calibrate) it again",
            type(gate).__name__,
            ", ".join(sorted(changed)),
        )
    gate.__dict__.update(fresh.__dict__)
    gate.__dict__.update(kept)


def _fitted_state(cls: Any) -> set[str]:
    """The attributes ``cls`` and its bases list in ``_fitted_state``."""
    return {name for klass in cls.__mro__ for name in getattr(klass, "_fitted_state", ())}


def clone_of(gate: Any) -> Any:
    """An unfitted gate with ``gate``'s parameters: its member gates cloned, plain values
    copied, anything else (a backend) shared."""

    def cloned(name: str, value: Any) -> Any:
        if name in gate.member_params:
            return value.__sklearn_clone__()
        return copy.deepcopy(value) if isinstance(value, _PLAIN) else value

    return type(gate)(**{name: cloned(name, value) for name, value in gate.get_params(deep=False).items()})


def built_once(gate: Any, slot: str, build: Callable[[], T]) -> T:
    """The object in attribute ``slot`` of ``gate``, built by ``build`` on first use, once
    whichever threads ask. ``__init__`` sets the slot to ``None``, so ``set_params``,
    which takes a fresh gate's attributes, never keeps an object built from the old
    parameters (and a clone, a fresh gate, builds its own)."""
    built = getattr(gate, slot)
    if built is None:
        with gate._build_lock:
            built = getattr(gate, slot)
            if built is None:
                built = build()
                setattr(gate, slot, built)
    return built


def estimator_tags() -> Any:
    """What scikit-learn's ``check_is_fitted`` reads first: an estimator that needs
    fitting (scikit-learn is imported only when it asks)."""
    from sklearn.utils import Tags, TargetTags

    return Tags(estimator_type=None, target_tags=TargetTags(required=False))
