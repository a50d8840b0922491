"""Sentence embeddings from a sentence-transformers folder run by onnxruntime.

Same vectors as ``SentenceEmbedder`` (checked at export, see ``onnx_export``), about
twice as fast for one question on one core. A folder this package cannot run this way
(not a local folder, an unsupported pipeline, an export that fails its check) is
embedded by ``SentenceEmbedder`` instead, with a logged warning saying why.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ....errors import BackendError, MissingExtraError, MissingModelPackageError, UnsupportedFolderError
from ... import embedded
from ...optional import require
from ..embedder import SentenceEmbedder
from ..inputs import DEFAULT_BATCH_SIZE, checked_embeddings, shows_progress, texts_to_embed
from .export import cached_export, onnx_pipeline
from .runner import OnnxPipeline, intra_op_threads

log = logging.getLogger(__name__)


class OnnxEmbedder:
    """An ``Embedder`` running a sentence-transformers model folder through onnxruntime;
    ``model=None`` means the embedded all-MiniLM-L6-v2 (384-d).

    The model's Transformer is exported to ONNX once per folder and exporter version
    (cached under ``cache_dir()``), pooled and normalised as the folder's own
    modules say, with the folder's tokenizer and ``max_seq_length``. onnxruntime uses
    ``OMP_NUM_THREADS`` threads (else torch's count). ``backend`` tells, once loaded,
    what runs the model: ``"onnx"``, or ``"torch"`` when it fell back to
    ``SentenceEmbedder``. ``model_id`` and ``settings`` are those of
    ``SentenceEmbedder`` on the same model, so saved gates do not depend on the backend.
    """

    def __init__(
        self,
        model: str | None = None,
        *,
        batch_size: int = DEFAULT_BATCH_SIZE,
        normalize: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        require("onnxruntime", needed_for="OnnxEmbedder")
        if model is None:
            embedded.embedded_minilm_dir()  # a missing weight package is said now, not at the first question
        self._name = model
        self.batch_size = batch_size
        self.normalize = normalize
        self._lock = threading.Lock()
        self._runner: OnnxPipeline | SentenceEmbedder | None = None

    @property
    def model_id(self) -> str:
        """Identifier recorded with saved gates: the given id/path, or the embedded model's."""
        return embedded.MINILM_ID if self._name is None else self._name

    @property
    def backend(self) -> str:
        """``"onnx"`` or ``"torch"`` (loads the model on first access)."""
        return "torch" if isinstance(self._ensure_loaded(), SentenceEmbedder) else "onnx"

    @property
    def dimension(self) -> int:
        """Embedding width (loads the model on first access)."""
        runner = self._ensure_loaded()
        return runner.dimension if isinstance(runner, SentenceEmbedder) else runner.pipeline.dimension

    def settings(self) -> dict[str, Any]:
        """What a saved gate records to rebuild this embedder (see ``representers.rebuild_embedded``)."""
        return {"kind": "embedder", "embedder": self.model_id}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dimension)``, L2-normalised when ``normalize=True``."""
        texts = texts_to_embed(texts)
        runner = self._ensure_loaded()
        if isinstance(runner, SentenceEmbedder):
            return runner.embed(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        try:
            with self._lock:
                vectors = runner.embed(
                    texts, normalize=self.normalize, batch_size=self.batch_size, batches=self._progress(len(texts))
                )
        except Exception as exc:
            raise BackendError(f"{self.model_id} failed to embed {len(texts)} texts: {exc}") from exc
        return checked_embeddings(vectors, len(texts), self.dimension, self.model_id)

    def _progress(self, n_texts: int) -> Any:
        if not shows_progress(n_texts):
            return None
        from tqdm import tqdm

        total = -(-n_texts // self.batch_size)
        return lambda starts: tqdm(starts, total=total, desc="Batches")

    def _ensure_loaded(self) -> OnnxPipeline | SentenceEmbedder:
        if self._runner is None:
            with self._lock:
                if self._runner is None:
                    self._runner = self._load()
        return self._runner

    def _load(self) -> OnnxPipeline | SentenceEmbedder:
        start = time.perf_counter()
        try:
            folder = self._folder()
            model_file = cached_export(folder)
            runner = onnx_pipeline(folder, model_file, threads=intra_op_threads())
        except (MissingExtraError, MissingModelPackageError):
            raise
        except Exception as exc:  # whatever stops the export or the session, torch still runs the model
            log.warning("%s runs on torch: %s", self.model_id, exc)
            return SentenceEmbedder(self._name, batch_size=self.batch_size, normalize=self.normalize)
        log.info("loaded %s on onnxruntime in %.2f s", self.model_id, time.perf_counter() - start)
        return runner

    def _folder(self) -> Path:
        if self._name is None:
            embedded.use_offline_hub()
            return embedded.embedded_minilm_dir()
        folder = Path(self._name).expanduser()
        if not (folder / "modules.json").is_file():
            raise UnsupportedFolderError(f"{self._name!r} is not a local sentence-transformers folder")
        return folder

    def __repr__(self) -> str:
        return f"OnnxEmbedder({self._name!r}, batch_size={self.batch_size}, normalize={self.normalize})"
