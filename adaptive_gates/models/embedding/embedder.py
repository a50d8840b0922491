"""Sentence embeddings from a sentence-transformers model, loaded lazily and thread-safe."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Sequence
from typing import Any

import numpy as np

from ...errors import BackendError
from .. import embedded
from ..optional import require
from .inputs import DEFAULT_BATCH_SIZE, checked_embeddings, shows_progress, texts_to_embed

log = logging.getLogger(__name__)


class SentenceEmbedder:
    """An ``Embedder`` over sentence-transformers; ``model=None`` means the embedded
    all-MiniLM-L6-v2 (384-d). Calls are serialised by a per-instance lock, because a
    shared fast tokenizer is not safe to use from several threads at once."""

    def __init__(
        self,
        model: str | None = None,
        *,
        device: str = "cpu",
        batch_size: int = DEFAULT_BATCH_SIZE,
        normalize: bool = True,
    ) -> None:
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be a positive int, got {batch_size!r}")
        if model is None:
            embedded.embedded_minilm_dir()  # a missing weight package is said now, not at the first question
        self._name = model
        self.device = device
        self.batch_size = batch_size
        self.normalize = normalize
        self._lock = threading.Lock()
        self._model: Any = None

    @property
    def model_id(self) -> str:
        """Identifier recorded with saved gates: the given id/path, or the embedded model's."""
        return embedded.MINILM_ID if self._name is None else self._name

    @property
    def dimension(self) -> int:
        """Embedding width (loads the model on first access)."""
        model = self._ensure_loaded()
        # Newer sentence-transformers renamed the method (the old name warns); old ones lack it.
        get_dim = getattr(model, "get_embedding_dimension", None) or (model.get_sentence_embedding_dimension)
        dim = get_dim()
        if dim is None:
            raise BackendError(f"{self.model_id} does not declare its embedding dimension")
        return int(dim)

    def settings(self) -> dict[str, Any]:
        """What a saved gate records to rebuild this embedder (see ``representers.rebuild_embedded``)."""
        return {"kind": "embedder", "embedder": self.model_id}

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """float32 ``(len(texts), dimension)``, L2-normalised when ``normalize=True``."""
        texts = texts_to_embed(texts)
        model = self._ensure_loaded()
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        try:
            with self._lock:
                vectors = model.encode(
                    texts,
                    batch_size=self.batch_size,
                    normalize_embeddings=self.normalize,
                    convert_to_numpy=True,
                    show_progress_bar=shows_progress(len(texts)),
                )
        except Exception as exc:
            raise BackendError(f"{self.model_id} failed to embed {len(texts)} texts: {exc}") from exc
        return checked_embeddings(vectors, len(texts), self.dimension, self.model_id)

    def _ensure_loaded(self) -> Any:
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._model = self._load()
        return self._model

    def _load(self) -> Any:
        start = time.perf_counter()
        # outside the try: a missing extra is not a load failure
        sentence_transformers = require("sentence_transformers", needed_for="SentenceEmbedder")
        if self._name is None:  # outside the try too: a missing weight package is not a load failure
            embedded.use_offline_hub()
            path = str(embedded.embedded_minilm_dir())
        else:
            path = self._name
        try:
            model = sentence_transformers.SentenceTransformer(path, device=self.device)
        except Exception as exc:
            raise BackendError(f"could not load embedding model {self.model_id!r}: {exc}") from exc
        log.info("loaded %s on %s in %.1f s", self.model_id, self.device, time.perf_counter() - start)
        return model
