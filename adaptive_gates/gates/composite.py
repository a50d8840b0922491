"""Gates saved inside another gate's directory (a budget's wrapped gate, a cascade's
stages, a stacked gate's members).

A member is saved as a gate of its own, then its files are moved into the holder's
directory under a prefix (``<prefix>.<file>``) and its ``config.json`` becomes a field
of the holder's state. The holder's checksums so cover the member's files and config,
the member's own checksums are verified again when it is loaded, and the directory
stays flat, so holders nest (a budget around a cascade) and can be overwritten.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from ..errors import GateLoadError
from ..persistence import CONFIG_FILE, safe_member_path
from .base import Gate


def save_member(gate: Gate, directory: Path, prefix: str) -> dict[str, Any]:
    """Save ``gate`` into ``directory`` under ``prefix``; return the state that loads it."""
    with tempfile.TemporaryDirectory() as tmp:
        saved = gate.save(Path(tmp) / "member")
        config = json.loads((saved / CONFIG_FILE).read_text(encoding="utf-8"))
        for name in config["files"]:
            shutil.copyfile(saved / name, directory / f"{prefix}.{name}")
    return {"prefix": prefix, "config": config}


def load_member(directory: Path, state: object, what: str, backends: dict[str, Any]) -> Gate:
    """The member ``save_member`` wrote (``state`` is what it returned), built with
    the backends among ``backends`` that its kind of gate takes."""
    if not isinstance(state, dict) or not isinstance(state.get("prefix"), str) or not isinstance(state.get("config"), dict):
        raise GateLoadError(f"{directory}: field 'state.{what}' is missing or malformed")
    prefix, config = state["prefix"], state["config"]
    files = config.get("files")
    if not isinstance(files, dict):
        raise GateLoadError(f"{directory}: field 'state.{what}.config.files' is missing")
    if config.get("gate_type") not in Gate.gate_names():
        raise GateLoadError(f"{directory}: {what} is of gate type {config.get('gate_type')!r}, which is no known gate")
    target = Gate.gate_class(config["gate_type"])
    with tempfile.TemporaryDirectory() as tmp:
        member = Path(tmp) / "member"
        member.mkdir()
        (member / CONFIG_FILE).write_text(json.dumps(config), encoding="utf-8")
        safe_member_path(directory, prefix, f"state.{what}.prefix")
        for name in files:
            safe_member_path(member, name, f"state.{what}.config.files")
            source = safe_member_path(directory, f"{prefix}.{name}", f"state.{what}.prefix")
            if not source.is_file():
                raise GateLoadError(f"{directory}: missing file {prefix}.{name!r} of the {what}")
            shutil.copyfile(source, member / name)
        try:
            return Gate.load(member, **member_backends(target, backends))
        except GateLoadError as exc:
            raise GateLoadError(f"{directory}: the {what} cannot be loaded: {exc}") from None


def member_backends(target: type[Gate], backends: dict[str, Any]) -> dict[str, Any]:
    """The backends a gate of type ``target`` is built with: those among its
    ``backend_params``; a gate that holds members itself gets them all to pass on."""
    if target.holds_gates:
        return backends
    return {name: value for name, value in backends.items() if name in target.backend_params}
