"""scikit-learn's parameter conventions for gates, kept by duck typing: every gate
answers ``get_params`` and ``set_params``, ``sklearn.base.clone`` (``__sklearn_clone__``)
and ``check_is_fitted`` (``__sklearn_is_fitted__``, ``__sklearn_tags__``) as an estimator does, without
deriving from ``BaseEstimator``, so importing the package loads no scikit-learn and a
gate shows none of scikit-learn's own machinery (metadata routing).

A gate's ``__init__`` keeps every argument as-is under its own name, so the
parameters are read back from its signature, as ``BaseEstimator`` does. What each
parameter must be is declared in a table per class (``_parameter_constraints``, as
scikit-learn's estimators declare theirs; the vocabulary is ``adaptive_gates.gates.constraints``),
checked once per construction by the constructor marked ``@validating``, so also by
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
import threading
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from .constraints import validate_params

logger = logging.getLogger(__name__)

P = TypeVar("P", bound="GateParams")
T = TypeVar("T")

#: Values a clone copies; anything else (a model, an embedder) is a backend it shares.
_PLAIN = (str, int, float, bool, type(None), list, tuple, dict)


def _same(new: Any, old: Any) -> bool:
    """Whether a parameter set to ``new`` keeps its value ``old``: the same object, or an
    equal plain value of the same type."""
    return new is old or (isinstance(new, _PLAIN) and type(new) is type(old) and new == old)


def validating(init: Callable[..., None]) -> Callable[..., None]:
    """Mark a gate constructor: it first checks its arguments (``GateParams._check_arguments``)
    when it is the one called, not a subclass's ``super().__init__``: once per gate,
    before any state is built from a refused value."""
    signature = inspect.signature(init)

    @functools.wraps(init)
    def __init__(self: GateParams, *args: Any, **kwargs: Any) -> None:
        if type(self).__init__ is __init__:
            try:
                bound = signature.bind(self, *args, **kwargs)
            except TypeError:
                pass  # a call that does not fit: the constructor says so in Python's words
            else:
                bound.apply_defaults()
                type(self)._check_arguments({k: v for k, v in bound.arguments.items() if k != "self"})
        init(self, *args, **kwargs)

    return __init__


class GateParams:
    """scikit-learn's parameter protocol: ``get_params``, a ``set_params`` that validates
    through the constructor and keeps or drops fitted state as the module says, and a
    clone that shares backends.

    A subclass lists in ``_fitted_state`` the attributes its ``fit``/``load`` learn
    (the calibration is always one), in ``_serving_params`` the parameters that fitted
    state does not depend on, in ``backend_params`` those that are backends (model
    objects: passed again at load, never saved), and in ``member_params`` those that are
    gates it is made of (cloned with it, saved in its directory).
    """

    _fitted_state: ClassVar[tuple[str, ...]] = ("_calibration",)
    _serving_params: ClassVar[frozenset[str]] = frozenset({"fallback_retrieve"})
    #: Constructor parameters that are backends (models): passed again at load, never saved.
    backend_params: ClassVar[frozenset[str]] = frozenset()
    #: Constructor parameters that are member gates: cloned unfitted by a clone, saved
    #: and loaded with the gate, never shared between a gate and its clone.
    member_params: ClassVar[frozenset[str]] = frozenset()
    #: What each constructor parameter must be (``adaptive_gates.gates.constraints``); a
    #: class's table adds to those of the classes it derives from.
    _parameter_constraints: ClassVar[dict[str, Any]] = {}
    #: Held while an object the gate builds on first use is built (``_built_once``):
    #: one per gate, so one gate loading its model never holds up another's.
    _build_lock: threading.Lock

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if "__init__" in cls.__dict__:
            cls.__init__ = validating(cls.__dict__["__init__"])  # type: ignore[method-assign]  # wrapped on purpose

    @classmethod
    def _check_arguments(cls, params: dict[str, Any]) -> None:
        """Refuse constructor arguments that break the tables of the class and its bases,
        then those ``_check_params`` refuses. Every constructor calls it (``set_params``
        and ``clone`` construct too)."""
        tables = (vars(klass).get("_parameter_constraints", {}) for klass in reversed(cls.__mro__))
        validate_params(params, {name: entry for table in tables for name, entry in table.items()})
        cls._check_params(params)

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        """Checks no table entry can make (parameters that depend on each other);
        ``params`` are the constructor's arguments, each of them already checked."""

    def _built_once(self, slot: str, build: Callable[[], T]) -> T:
        """The object in attribute ``slot``, built by ``build`` on first use, once
        whichever threads ask. ``__init__`` sets the slot to ``None``, so ``set_params``,
        which takes a fresh gate's attributes, never keeps an object built from the old
        parameters (and a clone, a fresh gate, builds its own)."""
        built = getattr(self, slot)
        if built is None:
            with self._build_lock:
                built = getattr(self, slot)
                if built is None:
                    built = build()
                    setattr(self, slot, built)
        return built

    @classmethod
    def param_names(cls) -> list[str]:
        """The constructor parameters, in signature order (``*args``/``**kwargs`` are
        refused, as scikit-learn refuses them)."""
        signature = inspect.signature(cls.__init__)
        for p in signature.parameters.values():
            if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD):
                raise TypeError(f"{cls.__name__}.__init__ must not take *args or **kwargs (scikit-learn convention)")
        return [name for name in signature.parameters if name != "self"]

    def get_params(self, deep: bool = True) -> dict[str, Any]:
        """The constructor parameters by name, as given; ``deep`` adds a nested one's own
        (``name__param``) for a parameter that has ``get_params``, as scikit-learn does."""
        params = {name: getattr(self, name) for name in self.param_names()}
        if deep:
            for name, value in list(params.items()):
                if callable(getattr(value, "get_params", None)) and not isinstance(value, type):
                    params.update({f"{name}__{key}": nested for key, nested in value.get_params().items()})
        return params

    def set_params(self: P, **params: Any) -> P:
        """Set constructor parameters (``name__param`` reaches a nested one).

        Every value is validated as the constructor does before anything changes.
        Fitted state survives a change of serving parameters only (a value set again
        to what it is changes nothing); see the module docstring.
        """
        if not params:
            return self
        names = self.param_names()
        own: dict[str, Any] = {}
        for key, value in params.items():
            name, _, sub = key.partition("__")
            if name not in names:
                raise ValueError(f"invalid parameter {name!r} for {type(self).__name__}; valid ones: {names}")
            if sub:
                nested = getattr(self, name)
                if not callable(getattr(nested, "set_params", None)):
                    raise ValueError(f"parameter {name!r} of {type(self).__name__} has no set_params for {key!r}")
                nested.set_params(**{sub: value})
            else:
                own[name] = value
        current = self.get_params(deep=False)
        fresh = type(self)(**{**current, **own})  # validates, unfitted
        changed = {name for name, value in own.items() if not _same(value, current[name])}
        kept = {}
        if changed <= self._serving_params:
            kept = {name: self.__dict__[name] for name in self._all_fitted_state() if name in self.__dict__}
        elif self._holds_fitted_state():
            logger.warning(
                "%s.set_params(%s): its fitted state and calibration belong to the old parameters and "
                "were dropped; fit (or calibrate) it again",
                type(self).__name__,
                ", ".join(sorted(changed)),
            )
        self.__dict__.update(fresh.__dict__)
        self.__dict__.update(kept)
        return self

    @classmethod
    def _all_fitted_state(cls) -> set[str]:
        return {name for klass in cls.__mro__ for name in getattr(klass, "_fitted_state", ())}

    def _holds_fitted_state(self) -> bool:
        """Whether any fitted-state attribute holds something (unfitted: ``None``)."""
        return any(self.__dict__.get(name) is not None for name in self._all_fitted_state())

    def __sklearn_clone__(self: P) -> P:
        """An unfitted gate with the same parameters (``sklearn.base.clone``): its
        member gates cloned, its backends shared, the rest copied."""
        return type(self)(**{name: self._cloned(name, value) for name, value in self.get_params(deep=False).items()})

    def __sklearn_tags__(self) -> Any:
        """What scikit-learn's ``check_is_fitted`` reads first: an estimator that needs
        fitting (scikit-learn is imported only when it asks)."""
        from sklearn.utils import Tags, TargetTags

        return Tags(estimator_type=None, target_tags=TargetTags(required=False))

    def _cloned(self, name: str, value: Any) -> Any:
        """What a clone takes for parameter ``name``: a member gate cloned, a plain value
        copied, anything else (a backend) shared."""
        if name in self.member_params:
            return value.__sklearn_clone__()
        return copy.deepcopy(value) if isinstance(value, _PLAIN) else value
