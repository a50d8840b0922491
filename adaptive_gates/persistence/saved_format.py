"""Save and load gates (and retrievers) as a directory of JSON and arrays (never pickle).

Layout: ``config.json`` (format, gate type, library versions, parameters,
threshold, calibration, the gate's own state, a SHA-256 of every other file, and
a SHA-256 of each of its own fields) plus the gate's array files. A gate that holds
gates (a budget's wrapped gate, a cascade's stages, a stacked gate's members) saves
each in a sub-folder of its directory, a saved directory of its own; its
``config.json`` lists the SHA-256 of each sub-folder's ``config.json`` (``folders``),
which lists the SHA-256 of that folder's files in turn, so the holder's checksums
cover everything its members hold, however deep they nest. A load refuses
a missing or modified file or field, a wrong format version or gate type, and
names what is wrong. A save replaces only a directory that holds a saved gate.

A saved gate is often someone else's, so a load reads only inside its directory:
every stored name (an entry of ``files`` or ``folders``, a member's folder or prefix)
goes through ``safe_member_path``, which refuses a name that is absolute, climbs out
(``..``), holds a path separator, or resolves outside the directory, and any symbolic
link; no entry of the directory (or of a member's folder) may be a link either. The
directory itself may be a link (where a user keeps a gate is their choice); everything
inside it may not.

A save never loses the gate that was there, and a load never reads a directory half
swapped: see ``directory_swap``.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tokenize
from collections.abc import Callable
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

from ..errors import GateLoadError
from . import strict_json
from .directory_swap import replace_directory
from .shipped_folder import check_not_shipped

FORMAT = "adaptive-gates/gate"
#: 2: config.json carries checksums of its own fields (version 1 had none, so an
#: edited parameter or threshold loaded silently).
FORMAT_VERSION = 2
CONFIG_FILE = "config.json"
#: The field of config.json holding the SHA-256 of each of its other fields.
CHECKSUMS_FIELD = "checksums"
#: The widest embedding a saved gate may declare (models give a few thousand at most).
MAX_DIMENSION = 1 << 16


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


def _json_sha256(value: Any) -> str:
    """SHA-256 of a JSON value in canonical form, so re-indenting or reordering
    ``config.json`` keeps it valid while any change of a value does not."""
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def safe_member_path(directory: Path, name: object, field: str) -> Path:
    """The path of the file ``name`` (a value stored in a saved gate's ``field``)
    inside ``directory``, or a GateLoadError naming the field and value.

    The one check every reader of a stored name goes through: ``name`` must be a
    plain file name (no separator, not ``.``/``..``, not absolute), and the path must
    be no symbolic link and resolve inside ``directory``.
    """
    if (
        not isinstance(name, str)
        or not name
        or name in (".", "..")
        or "/" in name
        or "\\" in name
        or "\0" in name
        or (os.altsep is not None and os.altsep in name)
        or Path(name).is_absolute()
    ):
        raise GateLoadError(
            f"{directory}: field {field!r} is {name!r}, not a plain file name inside the gate's directory; refused"
        )
    path = directory / name
    if path.is_symlink():
        raise GateLoadError(f"{directory}: field {field!r} is {name!r}, a symbolic link; a saved gate holds no links")
    root = directory.resolve()
    if path.resolve().parent != root:
        raise GateLoadError(f"{directory}: field {field!r} is {name!r}, which resolves outside the gate's directory")
    return path


def with_checksums(config: dict[str, Any]) -> dict[str, Any]:
    """``config`` with the checksum of each of its fields under ``CHECKSUMS_FIELD``."""
    fields = {name: value for name, value in config.items() if name != CHECKSUMS_FIELD}
    return {**fields, CHECKSUMS_FIELD: {name: _json_sha256(value) for name, value in fields.items()}}


def _check_config_checksums(config_path: Path, config: dict[str, Any]) -> None:
    """Refuse a config.json whose fields were edited, added or removed after saving."""
    checksums = config.get(CHECKSUMS_FIELD)
    if not isinstance(checksums, dict):
        raise GateLoadError(f"{config_path}: field {CHECKSUMS_FIELD!r} is missing")
    fields = {name for name in config if name != CHECKSUMS_FIELD}
    problems = [f"field {name!r} was added" for name in sorted(fields - checksums.keys())]
    problems += [f"field {name!r} was removed" for name in sorted(checksums.keys() - fields)]
    problems += [
        f"field {name!r} was changed"
        for name in sorted(fields & checksums.keys())
        if _json_sha256(config[name]) != checksums[name]
    ]
    if problems:
        raise GateLoadError(
            f"{config_path}: modified after saving ({'; '.join(problems)}, against the checksums saved "
            "with it); a saved gate is refused once edited: fit and save it again with the settings you want"
        )


def check_save_target(path: str | Path, overwrite: bool = False) -> None:
    """Refuse to save where something of the user's would be lost.

    Nothing may exist at ``path`` unless ``overwrite`` is set, and then only an
    empty directory or a saved gate: a directory whose ``config.json`` is of this
    format and whose other entries are all the gate's own files and member folders.
    Raises ``FileExistsError`` naming what is there, and ``ShippedGateError`` for any
    path in the folder of the gates the package ships. Callers can check before doing
    the work of fitting.
    """
    check_not_shipped(path)
    path = Path(path)
    if not (path.exists() or path.is_symlink()):
        return
    if not overwrite:
        raise FileExistsError(f"{path} exists; pass overwrite=True to replace a saved gate")
    if path.is_symlink() or not path.is_dir():
        raise FileExistsError(f"{path} is not a directory (a file or link); refusing to overwrite it")
    entries = sorted(path.iterdir())
    if not entries:
        return
    try:
        config = read_json_object(path / CONFIG_FILE)
    except GateLoadError:
        config = {}
    files, folders = config.get("files"), config.get("folders", {})
    if config.get("format") != FORMAT or not isinstance(files, dict) or not isinstance(folders, dict):
        raise FileExistsError(f"{path} is not a saved gate (no {CONFIG_FILE} of {FORMAT!r}); refusing to overwrite it")
    foreign = [
        p.name
        for p in entries
        if p.name != CONFIG_FILE and not ((p.name in files and p.is_file()) or (p.name in folders and p.is_dir()))
    ]
    if foreign:
        raise FileExistsError(
            f"{path} holds files that are not part of the saved gate ({', '.join(foreign)}); "
            "move them away before overwriting it"
        )


def write_directory(directory: Path, config: dict[str, Any], write_files: Callable[[Path], dict[str, Any]]) -> None:
    """Write a saved gate into the empty ``directory``: the folder a save swaps in, or
    a holder's sub-folder for a member gate (saved in place, with no copy).

    ``write_files`` writes the gate's array files, and its members' sub-folders (each
    written by this function), and returns the JSON part of its state (saved as
    ``state``); ``config.json`` then gets ``config``, the state, the SHA-256 of every
    file (``files``) and of every sub-folder's ``config.json`` (``folders``), and the
    checksums of its own fields.
    """
    state = write_files(directory)
    entries = sorted(directory.iterdir())
    files = {p.name: _sha256(p) for p in entries if p.is_file()}
    folders = {p.name: _sha256(p / CONFIG_FILE) for p in entries if p.is_dir()}
    full = with_checksums(
        {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            **config,
            "state": state,
            "files": files,
            "folders": folders,
        }
    )
    (directory / CONFIG_FILE).write_text(json.dumps(full, indent=2, allow_nan=False), encoding="utf-8")


def save_directory(path: str | Path, write: Callable[[Path], None], *, overwrite: bool = False) -> Path:
    """Save so that ``path`` always holds the old or the new gate: ``write`` (which
    calls ``write_directory``) fills a fresh temporary directory, which then replaces
    ``path`` whole (``directory_swap.replace_directory``). What may be replaced: see
    ``check_save_target``.
    """
    check_not_shipped(path)  # before the lock file beside it is made
    try:
        return replace_directory(Path(path), write, lambda target: check_save_target(target, overwrite))
    except FileExistsError:
        raise  # check_save_target's refusal, which names the path already
    except OSError as exc:  # a full disk, a folder made read-only: what was at ``path`` is kept
        raise OSError(f"cannot save to {path} ({exc.strerror or exc})") from exc


def read_json_file(directory: Path, name: str, field: str = "files") -> Any:
    """The JSON value of the file ``name`` of the saved ``directory`` (a stored name of
    ``field``, checked by ``safe_member_path``), or a GateLoadError naming the file and
    what is wrong: missing, not UTF-8, no valid JSON, nested too deep, a non-finite
    number (``strict_json``). Every JSON file of a saved gate is read here."""
    path = safe_member_path(directory, name, field)
    if not path.is_file():
        raise GateLoadError(f"{directory}: missing {name}")
    try:
        return strict_json.loads(path.read_bytes())
    except UnicodeDecodeError as exc:
        raise GateLoadError(f"{path}: not valid UTF-8 (byte {exc.start + 1})") from None
    except (ValueError, OSError) as exc:
        raise GateLoadError(f"{path}: not readable JSON ({exc})") from None


def read_json_object(config_path: Path) -> dict[str, Any]:
    """A JSON object read from ``config_path`` (``read_json_file``), or a GateLoadError
    saying why not."""
    config = read_json_file(config_path.parent, config_path.name)
    if not isinstance(config, dict):
        raise GateLoadError(f"{config_path}: expected a JSON object")
    return config


def read_config(path: str | Path) -> dict[str, Any]:
    """Read and verify ``config.json``, the checksums of the files it lists and of its
    member folders' ``config.json`` (inside ``reading(path)``, so that the files read
    next are the ones verified; a member's own files are verified when it is read)."""
    path = Path(path)
    if not path.is_dir():
        raise GateLoadError(f"{path}: not a saved gate directory")
    links = sorted(p.name for p in path.iterdir() if p.is_symlink())
    if links:
        raise GateLoadError(f"{path}: holds symbolic links ({', '.join(links)}); a saved gate holds no links")
    config_path = safe_member_path(path, CONFIG_FILE, CONFIG_FILE)
    config = read_json_object(config_path)
    if config.get("format") != FORMAT:
        raise GateLoadError(f"{config_path}: field 'format' is {config.get('format')!r}, expected {FORMAT!r}")
    version = config.get("format_version")
    if version == 1:
        raise GateLoadError(
            f"{config_path}: field 'format_version' is 1, a format whose config.json carries no "
            "checksums, so its parameters and threshold cannot be verified; fit and save the gate "
            f"again with this version of adaptive-gates (format version {FORMAT_VERSION})"
        )
    if version != FORMAT_VERSION:
        raise GateLoadError(
            f"{config_path}: field 'format_version' is {version!r}; "
            f"this version of adaptive-gates reads version {FORMAT_VERSION}"
        )
    _check_config_checksums(config_path, config)
    files = config.get("files")
    if not isinstance(files, dict):
        raise GateLoadError(f"{config_path}: field 'files' is missing")
    folders = config.get("folders", {})  # absent from a gate saved before members had folders
    if not isinstance(folders, dict):
        raise GateLoadError(f"{config_path}: field 'folders' has the wrong type ({type(folders).__name__})")
    for name, digest in files.items():
        _check_file(path, name, safe_member_path(path, name, "files"), digest)
    for name, digest in folders.items():
        folder = safe_member_path(path, name, "folders")
        _check_file(path, f"{name}/{CONFIG_FILE}", safe_member_path(folder, CONFIG_FILE, "folders"), digest)
    return config


def _check_file(directory: Path, name: str, path: Path, digest: object) -> None:
    """Refuse the file ``name`` of the saved ``directory`` (at ``path``) unless its
    SHA-256 is ``digest``."""
    if not path.is_file():
        raise GateLoadError(f"{directory}: missing file {name!r}")
    if _sha256(path) != digest:
        raise GateLoadError(f"{directory}: file {name!r} does not match its checksum (modified or corrupt)")


def config_field(config: dict[str, Any], name: str, kind: type | tuple[type, ...], *, within: str = "") -> Any:
    """``config[name]`` checked for presence and type, or a GateLoadError naming it;
    ``within`` names the field ``config`` is part of (e.g. ``"state"``), if any."""
    field = f"{within}.{name}" if within else name
    if name not in config:
        raise GateLoadError(f"saved gate: field {field!r} is missing")
    value = config[name]
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int subclass: accept it only where bool is asked for.
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise GateLoadError(f"saved gate: field {field!r} has the wrong type ({type(value).__name__})")
    return value


def check_saved_backend(
    directory: Path,
    field: str,
    saved: object,
    current: object,
    what: str,
    *,
    pass_argument: str | None = None,
    why: str | None = None,
) -> None:
    """Refuse to load a gate whose saved backend (``field`` of its state: a model id or
    a dimension) is not ``current``, that of the ``what`` it would run with.

    ``pass_argument``: no backend was given, so ``current`` is the embedded default's;
    the message then says which constructor argument takes the saved one. ``why``
    says what would go wrong with another backend.
    """
    if saved == current:
        return
    if pass_argument is not None:
        message = f"this gate was saved with {what} {saved!r}; pass {pass_argument}= with that model to load it"
    else:
        message = f"field {field!r} is {saved!r} but the given {what} is {current!r}"
    raise GateLoadError(f"{directory}: {message}" + (f"; {why}" if why else ""))


def save_array(directory: Path, name: str, array: np.ndarray) -> None:
    """Write one array as ``.npy`` (pickle disabled)."""
    np.save(directory / name, np.ascontiguousarray(array), allow_pickle=False)


def load_array(directory: Path, name: str, *, kinds: str = "biuf", ndim: int | None = None) -> np.ndarray:
    """Read one ``.npy`` array (never a pickle), or a GateLoadError naming the file and
    what is wrong.

    The header is read and checked before anything is allocated: a format version
    numpy writes, a plain dtype of one of ``kinds`` (numpy's kind letters: ``b`` bool,
    ``i``/``u`` integers, ``f`` floats; no objects, records or strings), ``ndim``
    dimensions when given, and a size the file holds exactly, so a header that lies
    about the array's size is refused rather than allocated.
    """
    path = safe_member_path(directory, name, "files")
    try:
        with path.open("rb") as fh:
            dtype, shape, fortran = _array_header(fh)
            where = f"{directory}: file {name!r}"
            if dtype.kind not in kinds or dtype.fields is not None or dtype.subdtype is not None:
                raise GateLoadError(f"{where} holds {dtype} values; expected a plain array of kind {kinds!r}")
            if any(size < 0 for size in shape) or (ndim is not None and len(shape) != ndim):
                raise GateLoadError(f"{where} has shape {shape}; expected {ndim or 'any'} dimension(s), none negative")
            count = math.prod(shape)
            available = os.fstat(fh.fileno()).st_size - fh.tell()
            if count * dtype.itemsize != available:
                raise GateLoadError(
                    f"{where} says it holds {shape} {dtype} values ({count * dtype.itemsize} bytes) "
                    f"but has {available} bytes of data"
                )
            flat = np.empty(count, dtype)
            if fh.readinto(flat.data) != available:
                raise GateLoadError(f"{where} changed while it was read")
    except OSError as exc:
        raise GateLoadError(f"{directory}: file {name!r} is not readable ({exc.strerror or exc})") from None
    return flat.reshape(shape, order="F" if fortran else "C")


def _array_header(fh: BinaryIO) -> tuple[np.dtype[Any], tuple[int, ...], bool]:
    """The dtype, shape and order of the ``.npy`` file open at ``fh``, read from its
    header alone (numpy's own readers, which bound the header's length)."""
    try:
        version = np.lib.format.read_magic(fh)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(fh)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(fh)
        else:
            raise ValueError(f"format version {version[0]}.{version[1]} is not one this package writes")
    # numpy parses the header as a Python literal: a damaged one fails in the tokenizer's
    # or the parser's own words
    except (ValueError, SyntaxError, EOFError, TypeError, tokenize.TokenError) as exc:
        raise GateLoadError(f"{fh.name}: not a .npy array ({exc})") from None
    return dtype, shape, fortran
