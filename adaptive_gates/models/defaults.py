"""The process-wide default models: the embedded SmolLM2 and MiniLM, loaded on first use.

The model ids and the loaders of the embedded files are in ``models.embedded``.
"""

from __future__ import annotations

import threading

from .embedded import MINILM_ID, SMOLLM2_ID
from .embedder import SentenceEmbedder
from .local_lm import LocalCausalLM

# The ids are named here too: gates record them next to the default they stand for.
__all__ = ["MINILM_ID", "SMOLLM2_ID", "default_embedder", "default_llm"]

_singleton_lock = threading.Lock()
_llm: LocalCausalLM | None = None
_embedder: SentenceEmbedder | None = None


def default_llm() -> LocalCausalLM:
    """The process-wide ``LocalCausalLM`` on the embedded SmolLM2 (loaded on first use)."""
    global _llm
    with _singleton_lock:
        if _llm is None:
            _llm = LocalCausalLM()
        return _llm


def default_embedder() -> SentenceEmbedder:
    """The process-wide ``SentenceEmbedder`` on the embedded all-MiniLM-L6-v2."""
    global _embedder
    with _singleton_lock:
        if _embedder is None:
            _embedder = SentenceEmbedder()
        return _embedder
