"""The process-wide default models: the embedded SmolLM2 and MiniLM, loaded on first use.

The model ids and the loaders of the embedded files are in ``models.embedded``.
"""

from __future__ import annotations

import importlib.util
import threading
from typing import Literal

from .embedded import MINILM_ID, SMOLLM2_ID
from .embedding.embedder import SentenceEmbedder
from .embedding.inputs import DEFAULT_BATCH_SIZE
from .embedding.onnx.embedder import OnnxEmbedder
from .lm.local import LocalCausalLM

# The ids are named here too: gates record them next to the default they stand for.
__all__ = ["MINILM_ID", "SMOLLM2_ID", "EmbedderBackend", "default_embedder", "default_llm", "sentence_embedder"]

#: What runs a sentence embedder: ``"auto"`` is onnxruntime where it is installed, else torch.
EmbedderBackend = Literal["auto", "onnx", "torch"]
_BACKENDS = ("auto", "onnx", "torch")

_singleton_lock = threading.Lock()
_llm: LocalCausalLM | None = None
_embedders: dict[str, OnnxEmbedder | SentenceEmbedder] = {}


def default_llm() -> LocalCausalLM:
    """The process-wide ``LocalCausalLM`` on the embedded SmolLM2 (loaded on first use)."""
    global _llm
    with _singleton_lock:
        if _llm is None:
            _llm = LocalCausalLM()
        return _llm


def sentence_embedder(
    model: str | None = None, *, backend: EmbedderBackend = "auto", batch_size: int = DEFAULT_BATCH_SIZE
) -> OnnxEmbedder | SentenceEmbedder:
    """A new embedder on a sentence-transformers model (``None``: the embedded
    all-MiniLM-L6-v2): an ``OnnxEmbedder`` for ``backend="onnx"``, or for ``"auto"``
    when onnxruntime is installed; otherwise a ``SentenceEmbedder`` (torch). Both give
    the same vectors and the same ``model_id``."""
    if _resolved(backend) == "onnx":
        return OnnxEmbedder(model, batch_size=batch_size)
    return SentenceEmbedder(model, batch_size=batch_size)


def default_embedder(backend: EmbedderBackend = "auto") -> OnnxEmbedder | SentenceEmbedder:
    """The process-wide embedder on the embedded all-MiniLM-L6-v2 for ``backend`` (see
    ``sentence_embedder``): one instance per backend, built on first use."""
    resolved = _resolved(backend)
    with _singleton_lock:
        if resolved not in _embedders:
            _embedders[resolved] = sentence_embedder(backend=resolved)
        return _embedders[resolved]


def _resolved(backend: EmbedderBackend) -> Literal["onnx", "torch"]:
    if backend not in _BACKENDS:
        raise ValueError(f"backend must be one of {_BACKENDS}, got {backend!r}")
    if backend == "onnx" or (backend == "auto" and importlib.util.find_spec("onnxruntime") is not None):
        return "onnx"
    return "torch"
