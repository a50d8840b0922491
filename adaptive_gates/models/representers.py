"""Representers: what turns a query into the vector f(q) a representation gate works on.

Thrust (SPEC §2) reads a hidden state of the LM that answers; for a black-box LLM the
paper suggests a smaller open model or a sentence encoder instead. Both are an
``Embedder`` (one protocol: ``model_id``, ``dimension``, ``embed``), so any embedder is a
representer as it is; ``CachedEmbedder`` memoises either for callers that represent the
same questions several times (cross-fitting, sweeps).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Literal

import numpy as np

from .embedding.cached import CachedEmbedder
from .protocols import Embedder

if TYPE_CHECKING:
    from .lm.local import LocalCausalLM

Pooling = Literal["last_token", "mean"]
_POOLINGS = ("last_token", "mean")


#: Thrust's f(q) is any ``Embedder``: a sentence encoder or an LM's hidden state.
Representer = Embedder


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
        if lm is None:
            from .embedded import embedded_smollm2_gguf

            embedded_smollm2_gguf()  # a missing weight package is said now, not at the first question
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
                from .defaults import default_llm

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

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The pooled hidden states, float32 ``(len(texts), hidden size)``."""
        if isinstance(texts, str):  # not a batch of its characters
            raise TypeError("embed() takes a sequence of strings, not a single string")
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
        return (
            f"LMHiddenStateRepresenter(layer={self.layer}, pooling={self.pooling!r}, "
            f"chat_template={self.chat_template})"
        )


def EmbedderRepresenter(embedder: Embedder | None = None) -> Embedder:
    """A sentence embedding as f(q), the black-box path: any ``Embedder`` is a
    representer as it is, so this returns ``embedder`` (default: the embedded
    all-MiniLM-L6-v2, loaded on first use)."""
    if embedder is not None:
        return embedder
    from .defaults import default_embedder

    return default_embedder()


#: The memo for representations is the embedders' memo.
CachedRepresenter = CachedEmbedder


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
    from .embedded import MINILM_ID, SMOLLM2_ID

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
