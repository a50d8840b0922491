"""The ONNX export of a sentence-transformers folder's Transformer, cached on disk.

The first use exports the model with torch's exporter (``torch.onnx.export(...,
dynamo=True)``; the older TorchScript one bakes sequence-length-dependent masks into
the graph and gives wrong states), runs the result beside sentence-transformers on
``CHECK_SENTENCES`` and keeps it only if every cosine is at least ``MIN_COSINE``.
It is then written under ``cache_dir()/onnx-<key>/``: ``model.onnx`` and a
``manifest.json`` with the file's size and SHA-256. The key hashes the folder's files
(names, sizes, modification times) and the exporter's package versions, so another
model or another exporter gets its own export. Later processes load the cached file
after checking its size and digest; a cache that fails that is discarded and
exported again. Processes that find no export at once export it once: each holds a
lock beside the export's folder while it checks the cache, so the others wait and
load the export the first one wrote. In a cache this process cannot write, where no
lock can be made, an export already there is loaded without one.

Only a cache no other user could have written is trusted: the cache folder, the
export's folder and its files must be owned by this user or root and writable by
neither group nor others. An export folder that fails this is discarded and exported
again (as a stale one is); a cache folder that fails it is refused
(``UntrustedCacheError``), since anything written there could be replaced. Exports are
written readable by everyone (folders 0755, files 0644) and writable by their owner
only, so a cache an administrator fills serves every user read-only.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.metadata
import json
import logging
import os
import stat
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from ....errors import BackendError, ExportMismatchError, UnsupportedFolderError, UntrustedCacheError
from ....persistence import strict_json
from ....persistence.directory_swap import exclusive_lock
from ...embedded import cache_dir, discard_dir, publish_dir
from ...optional import require
from ..st_folder import read_pipeline
from .runner import INPUT_NAMES, OnnxPipeline, max_length, open_session

log = logging.getLogger(__name__)

#: Bumped when the export or its manifest changes meaning.
EXPORT_FORMAT = 1
#: The least cosine between an export's vectors and sentence-transformers' on every check sentence.
MIN_COSINE = 0.99999
#: Short, long, cased, padded and over-long texts: what truncation, casing and pooling must get right.
CHECK_SENTENCES = (
    "who wrote the declaration of independence",
    "What is the capital city of Australia?",
    "  the tallest mountain in Africa  ",
    "x",
    "In which year did the first person walk on the Moon, and which mission carried the crew there?",
    "MINILM handles UPPER case, numbers like 1,234.5 and punctuation: fine?",
    " ".join(["a long question about the history of the printing press in early modern Europe"] * 40),
)
_VERSIONED = ("torch", "transformers", "sentence-transformers", "onnx", "onnxscript")
_MODEL_FILE = "model.onnx"
_MANIFEST = "manifest.json"


#: The former name of ``ExportMismatchError``.
ExportMismatch = ExportMismatchError


def export_key(folder: Path) -> str:
    """Hex key of ``folder``'s files (names, sizes, modification times) and the exporter versions."""
    digest = hashlib.sha256(f"format {EXPORT_FORMAT}\n".encode())
    for name in _VERSIONED:
        digest.update(f"{name} {_version(name)}\n".encode())
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)} {stat.st_size} {stat.st_mtime_ns}\n".encode())
    return digest.hexdigest()


def cached_export(folder: Path) -> Path:
    """The checked ONNX file of ``folder``'s Transformer, exported first if not cached.
    Raises ``ExportMismatchError`` when the export fails the check, ``UnsupportedFolderError``
    for pipelines this package does not run."""
    read_pipeline(folder)  # refuse unsupported folders before any work
    root = cache_dir()
    target = root / f"onnx-{export_key(folder)[:32]}"
    root.mkdir(mode=0o755, parents=True, exist_ok=True)
    distrust = untrusted(root)
    if distrust is not None:
        log.warning("refusing the ONNX cache %s: %s", root, distrust)
        raise UntrustedCacheError(
            f"refusing the ONNX cache {root}: {distrust}, so another user could have planted or could "
            "replace an export there; make it yours and unwritable by others (chmod go-w), or set "
            "ADAPTIVE_GATES_CACHE to a folder of your own"
        )
    with contextlib.ExitStack() as locked:
        try:  # a process exporting it meanwhile: wait, then load its export
            locked.enter_context(exclusive_lock(target))
        except FileExistsError:  # something planted at the lock's name
            raise
        except OSError as exc:  # a cache this process cannot write: nothing can be exported into it either
            return _unlocked_export(target, exc)
        if target.exists() or target.is_symlink():
            problem = untrusted_export(target) or cache_problem(target)
            if problem is None:
                log.info("loading the ONNX export of %s from %s", folder, target)
                return target / _MODEL_FILE
            log.warning("cached ONNX export %s is unusable (%s); exporting again", target, problem)
            discard_dir(target)
        publish_dir(target, lambda tmp: _export_checked(folder, tmp), f"the ONNX export of {folder}")
        problem = cache_problem(target)
        if problem is not None:
            raise BackendError(f"the ONNX export at {target} is unusable right after writing it: {problem}")
    return target / _MODEL_FILE


def _unlocked_export(target: Path, lock_error: OSError) -> Path:
    """The export already in ``target``, read without the lock, which could not be made
    (``lock_error``): in a cache no one can write, no export can change under the read."""
    distrust = untrusted_export(target) if target.exists() or target.is_symlink() else None
    if distrust is not None:
        log.warning("refusing the ONNX export %s: %s", target, distrust)
        raise UntrustedCacheError(f"refusing the ONNX export {target}: {distrust}; it cannot be exported again there")
    problem = cache_problem(target) if target.exists() else "nothing is cached there"
    if problem is not None:
        raise BackendError(f"no lock beside {target} ({lock_error}), so no export can be written: {problem}")
    log.info("loading the ONNX export from %s without a lock (%s)", target, lock_error)
    return target / _MODEL_FILE


def untrusted(path: Path, *, follow: bool = True) -> str | None:
    """Why ``path`` may have been written by another user (``None``: by this user or
    root only): another owner, or write permission for group or others. ``follow``
    False refuses a symbolic link itself (nothing in an export is one)."""
    try:
        info = path.stat() if follow else path.lstat()
    except OSError as exc:
        return f"{path} cannot be read: {exc}"
    if stat.S_ISLNK(info.st_mode):
        return f"{path} is a symbolic link"
    if not hasattr(os, "getuid"):  # no POSIX owners and modes to read (Windows)
        return None
    user = os.getuid()
    if info.st_uid not in (user, 0):
        return f"{path} is owned by uid {info.st_uid}, neither this user ({user}) nor root"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(info.st_mode):04o})"
    return None


def untrusted_export(target: Path) -> str | None:
    """Why the export folder ``target`` or a file in it may have been written by another
    user (``None``: neither could)."""
    problem = untrusted(target, follow=False)
    if problem is not None:
        return problem
    try:
        entries = sorted(target.iterdir())
    except OSError as exc:
        return f"{target} cannot be listed: {exc}"
    return next((p for p in (untrusted(e, follow=False) for e in entries) if p is not None), None)


def cache_problem(target: Path) -> str | None:
    """What is wrong with the cached export in ``target`` (``None`` when its model file
    has the size and SHA-256 its manifest records). A manifest nested too deep, or
    otherwise no JSON object, is malformed: the export is stale and made again."""
    try:
        manifest = strict_json.loads((target / _MANIFEST).read_bytes())
        size, expected = manifest["size"], manifest["sha256"]
    except (OSError, ValueError, KeyError, TypeError, RecursionError) as exc:
        return f"{target / _MANIFEST} is missing or malformed: {exc}"
    model = target / _MODEL_FILE
    try:
        actual_size = model.stat().st_size
        if actual_size != size:
            return f"{model} has {actual_size} bytes, its manifest says {size}"
        if _sha256(model) != expected:
            return f"{model} does not match the SHA-256 in its manifest"
    except OSError as exc:
        return f"{model} cannot be read: {exc}"
    return None


def check_export(folder: Path, model_file: Path) -> float:
    """The least cosine, over ``CHECK_SENTENCES``, between ``model_file`` run by
    onnxruntime and ``folder`` run by sentence-transformers."""
    reference = _sentence_transformer(folder).encode(
        list(CHECK_SENTENCES), convert_to_numpy=True, show_progress_bar=False
    )
    vectors = onnx_pipeline(folder, model_file, threads=1).embed(
        list(CHECK_SENTENCES), normalize=False, batch_size=len(CHECK_SENTENCES)
    )
    return _min_cosine(np.asarray(reference, dtype=np.float32), vectors)


def onnx_pipeline(folder: Path, model_file: Path, *, threads: int) -> OnnxPipeline:
    """``folder``'s tokenizer and pipeline around an onnxruntime session on ``model_file``."""
    pipeline = read_pipeline(folder)
    tokenizer = require("transformers").AutoTokenizer.from_pretrained(folder)
    session = open_session(model_file, threads)
    return OnnxPipeline(session, tokenizer, pipeline, max_length(folder, pipeline, tokenizer))


def _export_checked(folder: Path, out: Path) -> None:
    model_file = out / _MODEL_FILE
    start = time.perf_counter()
    _export(folder, model_file)
    cosine = check_export(folder, model_file)
    if not cosine >= MIN_COSINE:
        raise ExportMismatchError(
            f"the ONNX export of {folder} does not match sentence-transformers: least cosine "
            f"{cosine:.7f} < {MIN_COSINE} on the check sentences"
        )
    manifest = {
        "format": EXPORT_FORMAT,
        "folder": str(folder),
        "size": model_file.stat().st_size,
        "sha256": _sha256(model_file),
        "min_cosine": cosine,
        "versions": {name: _version(name) for name in _VERSIONED},
    }
    (out / _MANIFEST).write_text(json.dumps(manifest, indent=2), encoding="utf-8")
    _readable_by_all(out)
    log.info("exported %s to ONNX in %.1f s (least cosine %.7f)", folder, time.perf_counter() - start, cosine)


def _readable_by_all(out: Path) -> None:
    """The export folder 0755 and its files 0644 (the temporary folder it is written in
    is 0700): any user can load it, only its owner can change it."""
    for path in out.iterdir():
        path.chmod(0o755 if path.is_dir() else 0o644)
    out.chmod(0o755)


def _export(folder: Path, model_file: Path) -> None:
    torch = require("torch")
    require("onnxscript", needed_for="the ONNX export")
    model = _sentence_transformer(folder)
    transformer, tokenizer = model[0].auto_model, model.tokenizer
    names = [name for name in INPUT_NAMES if name in tokenizer.model_input_names]
    if names[:2] != ["input_ids", "attention_mask"]:
        raise UnsupportedFolderError(
            f"{folder}: the tokenizer gives {tokenizer.model_input_names}, not input_ids and attention_mask"
        )
    example = tokenizer(["a first example", "a second, somewhat longer example"], padding=True, return_tensors="pt")
    batch, tokens = torch.export.Dim("batch"), torch.export.Dim("tokens", max=4096)
    exporter_log = logging.getLogger("torch.onnx")
    level = exporter_log.level
    exporter_log.setLevel(logging.ERROR)  # its notes on optional operator libraries it skips
    try:
        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # the exporter's notes on its own internals
            program = torch.onnx.export(
                _last_hidden_state_module()(transformer),
                tuple(example[name] for name in names),
                input_names=names,
                output_names=["last_hidden_state"],
                dynamic_shapes={name: {0: batch, 1: tokens} for name in names},
                dynamo=True,
                verbose=False,
            )
    finally:
        exporter_log.setLevel(level)
    program.save(str(model_file))


def _sentence_transformer(folder: Path) -> Any:
    return require("sentence_transformers").SentenceTransformer(str(folder), device="cpu")


def _last_hidden_state_module() -> Any:
    torch = require("torch")

    class LastHiddenState(torch.nn.Module):  # type: ignore[name-defined]
        """The Transformer with positional inputs and one output, as the export needs."""

        def __init__(self, transformer: Any) -> None:
            super().__init__()
            self.transformer = transformer

        def forward(self, input_ids: Any, attention_mask: Any, token_type_ids: Any = None) -> Any:
            inputs = {"input_ids": input_ids, "attention_mask": attention_mask}
            if token_type_ids is not None:
                inputs["token_type_ids"] = token_type_ids
            return self.transformer(**inputs).last_hidden_state

    return LastHiddenState


def _min_cosine(a: np.ndarray, b: np.ndarray) -> float:
    a = a / np.maximum(np.linalg.norm(a, axis=1, keepdims=True), 1e-12)
    b = b / np.maximum(np.linalg.norm(b, axis=1, keepdims=True), 1e-12)
    return float((a * b).sum(axis=1).min())


def _sha256(path: Path) -> str:
    with path.open("rb") as fh:
        return hashlib.file_digest(fh, "sha256").hexdigest()


def _version(name: str) -> str:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return "absent"
