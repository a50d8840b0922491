"""Representers: what turns a query into the vector f(q) a representation gate works on.

Thrust (SPEC §2) reads a hidden state of the LM that answers; for a black-box LLM the
paper suggests a smaller open model or a sentence encoder instead. Both paths are here
behind one small protocol, plus a memo for callers that represent the same questions
several times (cross-fitting, sweeps).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

import numpy as np

from .errors import BackendError

if TYPE_CHECKING:
    from .models.local_lm import LocalCausalLM
    from .models.protocols import Embedder

Pooling = Literal["last_token", "mean"]
_POOLINGS = ("last_token", "mean")


@runtime_checkable
class Representer(Protocol):
    """Turns texts into fixed-size vectors f(x).

    ``model_id`` and ``dimension`` are recorded with saved gates, so a gate is never
    loaded against another representation. A representer may also offer
    ``settings() -> dict`` (JSON values): what is needed to rebuild it; the built-in
    ones do, so a gate saved with an embedded model loads without arguments.
    """

    @property
    def model_id(self) -> str: ...

    @property
    def dimension(self) -> int: ...

    def represent(self, texts: Sequence[str]) -> np.ndarray:
        """A float32 array of shape ``(len(texts), dimension)``."""
        ...


class LMHiddenStateRepresenter:
    """One pooled hidden layer of a local causal LM (the paper's white-box path).

    Args:
        lm: the LM; default: the embedded SmolLM2-135M-Instruct, loaded on first use.
        layer: index into the hidden-states tuple (0 = token embeddings, -1 = last
            layer; the paper uses the last and finds early layers work too).
        pooling: ``"last_token"`` (the last token's state, the natural summary of a
            decoder-only model) or ``"mean"`` over the question's tokens.
        max_length: questions are truncated to this many tokens.
        batch_size: questions per forward pass.
        chat_template: feed the question wrapped in the LM's chat template (ending at
            the assistant's turn) instead of raw. Default raw: f(q) then describes the
            query itself, as in the paper, and not a fixed template suffix.
    """

    def __init__(
        self,
        lm: LocalCausalLM | None = None,
        *,
        layer: int = -1,
        pooling: Pooling = "last_token",
        max_length: int = 256,
        batch_size: int = 16,
        chat_template: bool = False,
    ) -> None:
        if isinstance(layer, bool) or not isinstance(layer, int):
            raise ValueError(f"layer must be an int, got {layer!r}")
        if pooling not in _POOLINGS:
            raise ValueError(f"pooling must be one of {_POOLINGS}, got {pooling!r}")
        for name, value in (("max_length", max_length), ("batch_size", batch_size)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        self._lm = lm
        self._lm_lock = threading.Lock()
        self.layer = layer
        self.pooling = pooling
        self.max_length = max_length
        self.batch_size = batch_size
        self.chat_template = chat_template

    @property
    def lm(self) -> LocalCausalLM:
        """The LM (the embedded SmolLM2 unless one was given)."""
        with self._lm_lock:
            if self._lm is None:
                from .models.defaults import default_llm

                self._lm = default_llm()
            return self._lm

    @property
    def layer_index(self) -> int:
        """``layer`` as a non-negative index (so -1 and the last index name one layer)."""
        n_states = self.lm.num_layers + 1
        if not -n_states <= self.layer < n_states:
            raise ValueError(f"layer {self.layer} is out of range for {self.lm.model_id} ({n_states} hidden states)")
        return self.layer % n_states

    @property
    def model_id(self) -> str:
        """The LM id with the layer, pooling and input form: another layer is another representation."""
        form = "chat" if self.chat_template else "raw"
        return f"{self.lm.model_id} [hidden layer {self.layer_index}, {self.pooling}, {form}]"

    @property
    def dimension(self) -> int:
        return self.lm.hidden_size

    def settings(self) -> dict[str, Any]:
        """The JSON settings that rebuild this representer (given the same LM)."""
        return {
            "kind": "lm-hidden-state",
            "lm": self.lm.model_id,
            "layer": self.layer_index,
            "pooling": self.pooling,
            "max_length": self.max_length,
            "chat_template": self.chat_template,
        }

    def represent(self, texts: Sequence[str]) -> np.ndarray:
        states = self.lm.hidden_states(
            list(texts),
            layers=[self.layer],
            pooling=self.pooling,
            max_length=self.max_length,
            batch_size=self.batch_size,
            formatted=not self.chat_template,
        )
        return states[:, 0, :]

    def __repr__(self) -> str:
        return f"LMHiddenStateRepresenter(layer={self.layer}, pooling={self.pooling!r}, chat_template={self.chat_template})"


class EmbedderRepresenter:
    """A sentence embedding as f(q): the black-box path (the LLM's internals unseen).

    Args:
        embedder: any ``Embedder``; default: the embedded all-MiniLM-L6-v2.
    """

    def __init__(self, embedder: Embedder | None = None) -> None:
        self._embedder = embedder
        self._lock = threading.Lock()

    @property
    def embedder(self) -> Embedder:
        with self._lock:
            if self._embedder is None:
                from .models.defaults import default_embedder

                self._embedder = default_embedder()
            return self._embedder

    @property
    def model_id(self) -> str:
        return self.embedder.model_id

    @property
    def dimension(self) -> int:
        return int(self.embedder.dimension)

    def settings(self) -> dict[str, Any]:
        return {"kind": "embedder", "embedder": self.embedder.model_id}

    def represent(self, texts: Sequence[str]) -> np.ndarray:
        return self.embedder.embed(list(texts))

    def __repr__(self) -> str:
        return f"EmbedderRepresenter({self.model_id!r})"


class CachedRepresenter:
    """Memoises another representer's vectors by text (least recently used dropped first).

    Representations are deterministic, so a question seen again (cross-fitting, a
    sweep over gate settings, a repeated chatbot query) need not be run through the
    model again. Thread-safe; ``store`` pre-fills vectors computed elsewhere.
    """

    def __init__(self, inner: Representer, *, max_entries: int = 100_000) -> None:
        if isinstance(max_entries, bool) or not isinstance(max_entries, int) or max_entries < 1:
            raise ValueError(f"max_entries must be a positive int, got {max_entries!r}")
        self.inner = inner
        self.max_entries = max_entries
        self._table: OrderedDict[str, np.ndarray] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def settings(self) -> dict[str, Any] | None:
        settings = getattr(self.inner, "settings", None)
        return settings() if callable(settings) else None

    def __len__(self) -> int:
        return len(self._table)

    def store(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Put precomputed vectors (one row per text) into the memo."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.ndim != 2 or vectors.shape[0] != len(texts):
            raise ValueError(f"expected {len(texts)} rows of vectors, got shape {vectors.shape}")
        with self._lock:
            for text, vector in zip(texts, vectors):
                self._table[text] = vector
                self._table.move_to_end(text)
            while len(self._table) > self.max_entries:
                self._table.popitem(last=False)

    def represent(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        with self._lock:
            known = {t: self._table[t] for t in texts if t in self._table}
            for text in known:
                self._table.move_to_end(text)
        missing = list(dict.fromkeys(t for t in texts if t not in known))
        if missing:
            fresh = check_vectors(self.inner.represent(missing), len(missing), self.inner.model_id)
            self.store(missing, fresh)
            known.update(zip(missing, fresh))
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        return np.stack([known[t] for t in texts])

    def __repr__(self) -> str:
        return f"CachedRepresenter({self.inner!r}, max_entries={self.max_entries})"


def check_vectors(vectors: Any, n: int, source: str) -> np.ndarray:
    """``vectors`` as a finite float32 ``(n, d)`` array, or a ``BackendError`` saying what is wrong."""
    vectors = np.asarray(vectors, dtype=np.float32)
    if vectors.ndim != 2 or vectors.shape[0] != n:
        raise BackendError(f"representer {source!r} returned shape {vectors.shape} for {n} texts")
    if not np.all(np.isfinite(vectors)):
        raise BackendError(f"representer {source!r} returned NaN or inf")
    return vectors


def describe(representer: Representer) -> dict[str, Any]:
    """What a saved gate records about its representer: id, dimension and settings."""
    record: dict[str, Any] = {"id": representer.model_id, "dimension": int(representer.dimension)}
    settings = getattr(representer, "settings", None)
    record["settings"] = settings() if callable(settings) else None
    return record


def rebuild_embedded(record: dict[str, Any]) -> Representer | None:
    """The built-in representer on an *embedded* model described by ``record``, or
    ``None`` when it names another model (which the caller must then pass in).
    Raises ``KeyError``/``ValueError`` for malformed settings."""
    from .models.embedded import MINILM_ID, SMOLLM2_ID

    settings = record.get("settings")
    if not isinstance(settings, dict):
        return None
    if settings.get("kind") == "embedder" and settings.get("embedder") == MINILM_ID:
        return EmbedderRepresenter()
    if settings.get("kind") == "lm-hidden-state" and settings.get("lm") == SMOLLM2_ID:
        return LMHiddenStateRepresenter(
            layer=settings["layer"],
            pooling=settings["pooling"],
            max_length=settings["max_length"],
            chat_template=bool(settings["chat_template"]),
        )
    return None
