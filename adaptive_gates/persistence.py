"""Save and load gates as a directory of JSON and arrays (never pickle).

Layout: ``config.json`` (format, gate type, library versions, parameters,
threshold, calibration, the gate's own state, and a SHA-256 of every other file)
plus the gate's array files. A load refuses a missing or modified file, a wrong
format version or gate type, and names what is wrong.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .errors import GateLoadError

FORMAT = "adaptive-gates/gate"
FORMAT_VERSION = 1
CONFIG_FILE = "config.json"


def library_versions() -> dict[str, str]:
    """Versions of the libraries whose formats a saved gate depends on."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for dist in ("adaptive-gates", "numpy", "faiss-cpu", "scikit-learn"):
        try:
            out[dist] = version(dist)
        except PackageNotFoundError:
            continue
    return out


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_directory(
    path: str | Path,
    config: dict[str, Any],
    write_files: Callable[[Path], dict[str, Any]],
    *,
    overwrite: bool = False,
) -> Path:
    """Write a gate directory atomically.

    ``write_files`` writes the gate's array files into a fresh temporary
    directory and returns the JSON part of its state (saved as ``state``); the
    checksums and ``config.json`` are added, then the directory
    replaces ``path`` in one rename, so a crash never leaves a half-written gate
    where a good one was.
    """
    path = Path(path)
    if path.exists() and not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace it")
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{path.name}.", dir=path.parent))
    try:
        state = write_files(tmp)
        files = {p.name: _sha256(p) for p in sorted(tmp.iterdir()) if p.is_file()}
        full = {"format": FORMAT, "format_version": FORMAT_VERSION, **config, "state": state, "files": files}
        (tmp / CONFIG_FILE).write_text(json.dumps(full, indent=2, allow_nan=False), encoding="utf-8")
        if path.exists():
            backup = path.with_name(f".{path.name}.old")
            shutil.rmtree(backup, ignore_errors=True)
            os.replace(path, backup)
            os.replace(tmp, path)
            shutil.rmtree(backup, ignore_errors=True)
        else:
            os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return path


def read_json_object(config_path: Path) -> dict[str, Any]:
    """A JSON object read from ``config_path``, or a GateLoadError saying why not."""
    if not config_path.is_file():
        raise GateLoadError(f"{config_path.parent}: missing {config_path.name}")
    try:
        config = json.loads(config_path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise GateLoadError(f"{config_path}: not valid JSON ({exc})") from None
    if not isinstance(config, dict):
        raise GateLoadError(f"{config_path}: expected a JSON object")
    return config


def read_config(path: str | Path) -> dict[str, Any]:
    """Read and verify ``config.json`` and the checksums of the files it lists."""
    path = Path(path)
    if not path.is_dir():
        raise GateLoadError(f"{path}: not a saved gate directory")
    config_path = path / CONFIG_FILE
    config = read_json_object(config_path)
    if config.get("format") != FORMAT:
        raise GateLoadError(f"{config_path}: field 'format' is {config.get('format')!r}, expected {FORMAT!r}")
    if config.get("format_version") != FORMAT_VERSION:
        raise GateLoadError(
            f"{config_path}: field 'format_version' is {config.get('format_version')!r}; "
            f"this version of adaptive-gates reads version {FORMAT_VERSION}"
        )
    files = config.get("files")
    if not isinstance(files, dict):
        raise GateLoadError(f"{config_path}: field 'files' is missing")
    for name, digest in files.items():
        file_path = path / name
        if not file_path.is_file():
            raise GateLoadError(f"{path}: missing file {name!r}")
        if _sha256(file_path) != digest:
            raise GateLoadError(f"{path}: file {name!r} does not match its checksum (modified or corrupt)")
    return config


def config_field(config: dict[str, Any], name: str, kind: type | tuple[type, ...]) -> Any:
    """``config[name]`` checked for presence and type, or a GateLoadError naming it."""
    if name not in config:
        raise GateLoadError(f"saved gate: field {name!r} is missing")
    value = config[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int subclass: accept it only where bool is asked for.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise GateLoadError(f"saved gate: field {name!r} has the wrong type ({type(value).__name__})")
    return value


def save_array(directory: Path, name: str, array: np.ndarray) -> None:
    """Write one array as ``.npy`` (pickle disabled)."""
    np.save(directory / name, np.ascontiguousarray(array), allow_pickle=False)


def load_array(directory: Path, name: str) -> np.ndarray:
    """Read one ``.npy`` array (pickle disabled)."""
    try:
        return np.load(directory / name, allow_pickle=False)
    except (ValueError, OSError) as exc:
        raise GateLoadError(f"{directory}: file {name!r} is not a readable array ({exc})") from None
