"""A gate runnable loaded from a saved gate's directory, which LangChain can serialise.

A gate is saved as a directory of JSON and arrays (``Gate.save``), never a pickle, so
its LangChain form (``langchain_core.load.dumps``) names that directory: loading the
JSON back (``langchain_core.load.loads``) loads the gate from there again, with the
runnable's options.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from langchain_core.load.serializable import SerializedConstructor, SerializedNotImplemented

from adaptive_gates import Gate, load_gate

from .gate_runnable import GateRunnable
from .serialization import InPackageNamespace

#: The runnable's options its JSON keeps (beside the path); the gate's alternatives
#: and condenser are objects, and LangChain writes them as it writes any object.
_OPTIONS = ("input_key", "history_key", "history_window", "alternatives", "condense")


class SavedGateRunnable(InPackageNamespace, GateRunnable):
    """``GateRunnable`` over the gate saved in ``path``, loaded with ``load_gate``.

    Its JSON is ``{"path": ..., options}``: the directory as given (a relative one is
    read from the working directory of the process loading it) and the options that
    differ from their defaults. The gate must load from its directory alone (as the
    embedded models do); one needing a backend handed over at load time cannot be.

    Args:
        path: the saved gate's directory.
        gate: the gate already loaded from ``path`` (not loaded again); for callers
            that loaded it themselves.
        **options: ``GateRunnable``'s options (``input_key``, ``history_window``, ...).
    """

    path: str

    def __init__(self, path: str | Path, *, gate: Gate | None = None, **options: Any) -> None:
        loaded = load_gate(path) if gate is None else gate
        super().__init__(loaded, path=str(path), **options)

    def to_json(self) -> SerializedConstructor | SerializedNotImplemented:
        defaults = type(self).model_fields
        options = {
            name: getattr(self, name)
            for name in _OPTIONS
            if getattr(self, name) != defaults[name].get_default(call_default_factory=True)
        }
        return SerializedConstructor(lc=1, type="constructor", id=self.lc_id(), kwargs={"path": self.path, **options})
