"""Saving a gate to a directory of JSON and arrays (never a pickle), loading it back,
and gates saved inside another gate's directory.

A saved gate's ``config.json`` names its type (``gate_type``, the class's ``name`` in
the registry of every gate class), its parameters but the backends (models are passed
again at load), its threshold and calibration, what it was fitted on (``fitted_on``:
the outcomes' model and data), and the fitted state its class writes
(``_save_state``/``_load_state``); ``persistence`` writes it atomically with checksums.

A gate inside another (a budget's wrapped gate, a cascade's stages, a stacked gate's
members) is saved as a gate of its own in a sub-folder of the holder's directory,
written there directly while the holder's directory is written, and loaded from there;
the holder's state keeps ``{"folder": <name>}`` for it. The member's ``config.json``
checksums its files and the holder's checksums the member's ``config.json``
(``persistence``), so a changed member file is refused, naming it; holders nest (a
budget around a cascade: ``<budget>/gate/cheap/``), and the whole holder is swapped
in at once, as any save. For example a cascade::

    cascade/config.json          state: {"cheap": {"folder": "cheap"}, ...}
    cascade/cheap/config.json    the cheap stage's own, with its files' checksums
    cascade/cheap/labels.npy
    cascade/costly/config.json

Gates saved before members had sub-folders still load: their members' files sit in
the holder's directory as ``<prefix>.<file>`` and their ``config.json`` in the holder's
state (``{"prefix": ..., "config": ...}``); such a member is copied back out to a
temporary directory of its own to be loaded.

Members nest at most ``MAX_MEMBER_DEPTH`` levels below the gate loaded: a directory
crafted to nest deeper is refused with a ``GateLoadError`` naming the depth, before
loading it would exhaust Python's stack.
"""

from __future__ import annotations

import json
import math
import shutil
import tempfile
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Protocol, Self, TypeVar

from ...errors import GateLoadError
from ...persistence.directory_swap import reading
from ...persistence.saved_format import (
    CONFIG_FILE,
    config_field,
    library_versions,
    read_config,
    safe_member_path,
    write_directory,
)
from .calibration import Calibration
from .fitted_on import FittedOn

S = TypeVar("S", bound="Saveable")

#: The deepest a member gate may sit below the gate loaded (a budget around a cascade
#: of stacked gates nests three levels).
MAX_MEMBER_DEPTH = 32

#: How deep below the gate being loaded the member being loaded sits.
_member_depth: ContextVar[int] = ContextVar("member_depth", default=0)


class _NestedTooDeep(GateLoadError):
    """Members nested deeper than ``MAX_MEMBER_DEPTH``: raised once, at the deepest
    level, and passed up unwrapped (its message names the folder and the depth)."""


class Saveable(Protocol):
    """What saving and loading read of a gate (``Gate`` has it all): its registered
    name and the registry to load by name, its parameters but the backends and members,
    its threshold and calibration, and its fitted state's files."""

    name: ClassVar[str]
    backend_params: ClassVar[frozenset[str]]
    member_params: ClassVar[frozenset[str]]
    _calibration: Calibration | None
    _fitted_on: FittedOn | None

    @property
    def threshold_(self) -> float: ...

    @staticmethod
    def gate_names() -> list[str]: ...

    @classmethod
    def gate_class(cls, name: str) -> type[Any]: ...

    @classmethod
    def _current_params(cls, params: dict[str, Any]) -> dict[str, Any]: ...

    @classmethod
    def _from_saved(
        cls, path: Path, state: dict[str, Any], params: dict[str, Any], backends: dict[str, Any]
    ) -> Self: ...

    def _json_params(self) -> dict[str, Any]: ...

    def _write(self, directory: Path) -> None: ...

    def _save_state(self, directory: Path) -> dict[str, Any]: ...

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None: ...


def write_gate(gate: Saveable, directory: Path) -> None:
    """Write the fitted ``gate`` into the empty ``directory``: the folder a save swaps
    in, or the sub-folder of the gate holding it."""
    config = {
        "gate_type": gate.name,
        "library_versions": library_versions(),
        "params": gate._json_params(),
        "threshold": gate.threshold_,
        "calibration": gate._calibration.to_dict() if gate._calibration else None,
        "fitted_on": gate._fitted_on.to_dict() if gate._fitted_on else None,
    }
    write_directory(directory, config, gate._save_state)


def load_saved(cls: type[S], path: Path, backends: dict[str, Any]) -> S:
    """The gate saved at ``path``, a ``cls``, built with ``backends``; read while no save
    swaps the directory."""
    with reading(path):
        config = read_config(path)
        return _restore(_saved_class(cls, path, config), path, config, backends)


def _saved_class(cls: type[S], path: Path, config: dict[str, Any]) -> type[S]:
    """The class of the gate saved at ``path`` (``config`` its config.json): one
    registered, and a ``cls``."""
    gate_type = config_field(config, "gate_type", str)
    if gate_type not in cls.gate_names():
        raise GateLoadError(f"{path}: field 'gate_type' is {gate_type!r}, which is no known gate")
    target = cls.gate_class(gate_type)
    if not issubclass(target, cls):
        raise GateLoadError(f"{path}: field 'gate_type' is {gate_type!r}, expected {cls.name!r}")
    return target


def _restore(cls: type[S], path: Path, config: dict[str, Any], backends: dict[str, Any]) -> S:
    """The gate of class ``cls`` saved at ``path``, ``config`` its verified config.json."""
    params = cls._current_params(config_field(config, "params", dict))
    state = config_field(config, "state", dict)
    # Backends (models) are passed at load, never saved: a saved value under a
    # backend's name is no model, whatever it holds. Member gates load from the state.
    saved_backends = sorted(params.keys() & cls.backend_params)
    if saved_backends:
        name = saved_backends[0]
        raise GateLoadError(
            f"{path}: field 'params.{name}' is {params[name]!r}, but {name!r} is a backend, never saved; "
            f"pass {name}= to load()"
        )
    saved_members = sorted(params.keys() & cls.member_params)
    if saved_members:
        name = saved_members[0]
        raise GateLoadError(f"{path}: field 'params.{name}' is a member gate, saved in 'state', not in 'params'")
    try:
        gate = cls._from_saved(path, state, params, backends)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, GateLoadError):
            raise
        raise GateLoadError(f"{path}: field 'params' does not fit {cls.__name__} ({exc})") from None
    gate._load_state(path, state)
    calibration = config_field(config, "calibration", (dict, type(None)))
    if calibration is not None:
        try:
            gate._calibration = Calibration.from_dict(calibration)
        except (TypeError, ValueError) as exc:
            raise GateLoadError(f"{path}: field 'calibration' is malformed ({exc})") from None
    fitted_on = config.get("fitted_on")  # absent from gates saved before it was recorded
    if fitted_on is not None:
        if not isinstance(fitted_on, dict):
            raise GateLoadError(f"{path}: field 'fitted_on' must be an object or null")
        gate._fitted_on = FittedOn.from_dict(str(path), fitted_on)
    saved = config_field(config, "threshold", (int, float))
    if not math.isclose(gate.threshold_, saved, rel_tol=1e-9, abs_tol=1e-12):
        raise GateLoadError(
            f"{path}: field 'threshold' is {saved}, but the restored gate's threshold is {gate.threshold_}"
        )
    return gate


def save_member(gate: Saveable, directory: Path, folder: str) -> dict[str, Any]:
    """Save ``gate`` into the sub-folder ``folder`` of the holder's ``directory`` (being
    written); return the state that loads it."""
    (directory / folder).mkdir()
    gate._write(directory / folder)
    return {"folder": folder}


def load_member(cls: type[S], directory: Path, state: object, what: str, backends: dict[str, Any]) -> S:
    """The member ``save_member`` wrote into ``directory`` (``state`` is what it
    returned), a ``cls``, built with the backends among ``backends`` that its kind of
    gate takes. A member saved flattened (before members had sub-folders) loads from a
    temporary copy of its files. Members nested deeper than ``MAX_MEMBER_DEPTH`` are
    refused."""
    depth = _member_depth.get() + 1
    if depth > MAX_MEMBER_DEPTH:
        raise _NestedTooDeep(
            f"{directory}: the {what} is nested {depth} levels deep in member gates, "
            f"more than the {MAX_MEMBER_DEPTH} levels a saved gate may hold"
        )
    token = _member_depth.set(depth)
    try:
        if isinstance(state, dict) and "folder" in state:
            folder = safe_member_path(directory, state["folder"], f"state.{what}.folder")
            return _load_member_folder(cls, directory, folder, what, backends)
        with tempfile.TemporaryDirectory() as tmp:
            return _load_member_folder(cls, directory, _unflatten(directory, state, what, Path(tmp)), what, backends)
    finally:
        _member_depth.reset(token)


def _load_member_folder(cls: type[S], directory: Path, folder: Path, what: str, backends: dict[str, Any]) -> S:
    """The member saved in ``folder``, read under the lock of the holder's
    ``directory`` (no save swaps the holder, members and all, while it is read)."""
    try:
        config = read_config(folder)
        target = _saved_class(cls, folder, config)
        return _restore(target, folder, config, member_backends(target, backends))
    except _NestedTooDeep:
        raise
    except GateLoadError as exc:
        raise GateLoadError(f"{directory}: the {what} cannot be loaded: {exc}") from None


def _unflatten(directory: Path, state: object, what: str, member: Path) -> Path:
    """Write into the empty ``member`` the directory of a member saved flattened into the
    holder's ``directory``: its files there as ``<prefix>.<file>``, ``state`` holding its
    prefix and its config.json (``{"prefix": ..., "config": ...}``). Returns ``member``."""
    if (
        not isinstance(state, dict)
        or not isinstance(state.get("prefix"), str)
        or not isinstance(state.get("config"), dict)
    ):
        raise GateLoadError(f"{directory}: field 'state.{what}' is missing or malformed")
    prefix, config = state["prefix"], state["config"]
    files = config.get("files")
    if not isinstance(files, dict):
        raise GateLoadError(f"{directory}: field 'state.{what}.config.files' is missing")
    (member / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
    safe_member_path(directory, prefix, f"state.{what}.prefix")
    for name in files:
        safe_member_path(member, name, f"state.{what}.config.files")
        source = safe_member_path(directory, f"{prefix}.{name}", f"state.{what}.prefix")
        if not source.is_file():
            raise GateLoadError(f"{directory}: missing file {prefix}.{name!r} of the {what}")
        shutil.copyfile(source, member / name)
    return member


def member_backends(target: type[Saveable], backends: dict[str, Any]) -> dict[str, Any]:
    """The backends a gate of type ``target`` is built with: those among its
    ``backend_params``; a gate that holds members itself gets them all to pass on."""
    if target.member_params:
        return backends
    return {name: value for name, value in backends.items() if name in target.backend_params}
