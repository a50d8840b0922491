"""Saved gates in the layout of earlier versions, written by hand from a gate saved now,
so the tests can show that directories users have on disk still load."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path
from typing import Any

from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums


def flatten_members(path: Path) -> Path:
    """Rewrite the gate saved at ``path`` as saves wrote it before members had
    sub-folders: each member's files moved into the holder's directory as
    ``<prefix>.<file>`` (the prefix is the folder's name, as it was), its config.json
    embedded in the holder's state as ``{"prefix": ..., "config": ...}``, no ``folders``
    field, and the holder's checksums computed again. A member's own members are
    flattened first, as its save did then."""
    config = json.loads((path / CONFIG_FILE).read_text())
    embedded = {}
    for folder in config.pop("folders"):
        member = flatten_members(path / folder)
        member_config = json.loads((member / CONFIG_FILE).read_text())
        for name in member_config["files"]:
            (member / name).rename(path / f"{folder}.{name}")
        (member / CONFIG_FILE).unlink()
        member.rmdir()
        embedded[folder] = member_config
    config["state"] = _embedded(config["state"], embedded)
    config["files"] = {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(path.iterdir())
        if p.is_file() and p.name != CONFIG_FILE
    }
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config), indent=2))
    return path


def _embedded(state: Any, configs: dict[str, Any]) -> Any:
    """``state`` with each member record ``{"folder": name}`` replaced by the record of
    the flat layout, ``{"prefix": name, "config": configs[name]}``."""
    if isinstance(state, dict):
        if state.keys() == {"folder"}:
            return {"prefix": state["folder"], "config": configs[state["folder"]]}
        return {key: _embedded(value, configs) for key, value in state.items()}
    if isinstance(state, list):
        return [_embedded(value, configs) for value in state]
    return state


def logistic_stacked_gate(path: Path) -> Path:
    """Rewrite the stacked gate saved at ``path`` (fitted with ``model="logistic"``,
    ``embedding=False``) as saves wrote it before its combiner was a ``FeatureCombiner``:
    no ``model``, ``embedding`` or ``embedding_dims`` parameter, the logistic
    ``Combiner``'s own state as ``state.combiner`` (its arrays were the same files),
    and no ``state.default_threshold``."""
    config = json.loads((path / CONFIG_FILE).read_text())
    params, state = config["params"], config["state"]
    assert params["model"] == "logistic" and not params["embedding"], "a logistic gate without embedding"
    for name in ("model", "embedding", "embedding_dims"):
        del params[name]
    state["combiner"] = state["combiner"]["logistic"]
    del state["default_threshold"]
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config), indent=2))
    return path


def resign(path: Path) -> Path:
    """Make the gate saved at ``path`` consistent again after its files were changed by
    hand, as whoever crafts a saved gate does: the SHA-256 of every file it lists and
    of its own fields computed anew, so only the loader's checks of what the files hold
    stand between them and a load."""
    config = json.loads((path / CONFIG_FILE).read_text())
    config["files"] = {name: hashlib.sha256((path / name).read_bytes()).hexdigest() for name in config["files"]}
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config), indent=2))
    return path


def draft_check_before_self_report(path: Path) -> Path:
    """Rewrite the draft-check gate saved at ``path`` as saves wrote it before the
    self-report, the cold start and the agreement check: no ``self_report``,
    ``cold_start`` or ``agreement`` parameter and no ``state.agreement`` (its combiner
    read the agreement columns), the checksums computed again."""
    config = json.loads((path / CONFIG_FILE).read_text())
    for name in ("self_report", "cold_start", "agreement"):
        config["params"].pop(name, None)
    config["state"].pop("agreement", None)
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config), indent=2))
    return path


def nest_budgets(budget: Path, out: Path, depth: int) -> Path:
    """Write at ``out`` the budget saved at ``budget`` wrapped around itself: ``depth``
    budgets, each the member of the one above, around the budget's own member gate, as
    an attacker would craft it (every config.json's checksums computed again)."""
    shutil.copytree(budget / "gate", out.joinpath(*["gate"] * depth))
    config = json.loads((budget / CONFIG_FILE).read_text())
    for level in reversed(range(depth)):
        holder = out.joinpath(*["gate"] * level)
        for name in config["files"]:
            shutil.copyfile(budget / name, holder / name)
        config["folders"] = {"gate": hashlib.sha256((holder / "gate" / CONFIG_FILE).read_bytes()).hexdigest()}
        (holder / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))
    return out
