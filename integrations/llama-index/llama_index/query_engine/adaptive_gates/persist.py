"""A gated engine persisted beside its index's ``StorageContext``, and loaded back.

``persist_gated_index(index, gate, persist_dir)`` writes the index as LlamaIndex does
(``index.storage_context.persist``), the gate as the core saves one (a directory of JSON
and arrays, ``adaptive_gates_gate/``) and the engine's settings
(``adaptive_gates_engine.json``) into the same folder; ``load_gated_engine(persist_dir)``
reads the three back into an ``AdaptiveQueryEngine`` that decides and answers as the
one persisted. The gate's backends (an embedder, a chat model, ...) are given again at
load, as ``load_gate`` takes them; nothing is pickled.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from llama_index.core import StorageContext, load_index_from_storage
from llama_index.core.indices.base import BaseIndex
from llama_index.core.llms.llm import LLM

from adaptive_gates import Gate, GateLoadError, load_gate
from adaptive_gates.extend import read_json_file, write_text_whole

from .base import AdaptiveQueryEngine

#: The gate's directory and the engine's settings file inside ``persist_dir``.
GATE_DIR = "adaptive_gates_gate"
ENGINE_FILE = "adaptive_gates_engine.json"
_FORMAT = 1


def persist_gated_index(
    index: BaseIndex,
    gate: Gate,
    persist_dir: str | Path,
    *,
    similarity_top_k: int | None = None,
    reuse_draft: bool = True,
) -> Path:
    """Persist ``index``, ``gate`` and the engine settings (``similarity_top_k``,
    ``reuse_draft``) into ``persist_dir``; a gate persisted there before is replaced."""
    if not isinstance(gate, Gate):
        raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
    if similarity_top_k is not None and (isinstance(similarity_top_k, bool) or similarity_top_k < 1):
        raise ValueError(f"similarity_top_k must be a positive int or None, got {similarity_top_k!r}")
    folder = Path(persist_dir)
    index.storage_context.persist(persist_dir=str(folder))
    gate.save(folder / GATE_DIR, overwrite=True)
    settings = {"format": _FORMAT, "similarity_top_k": similarity_top_k, "reuse_draft": reuse_draft}
    write_text_whole(folder / ENGINE_FILE, json.dumps(settings, indent=2) + "\n")
    return folder


def load_gated_engine(persist_dir: str | Path, *, llm: LLM | None = None, **backends: Any) -> AdaptiveQueryEngine:
    """The ``AdaptiveQueryEngine`` persisted in ``persist_dir``: its index (with the
    embedding model of ``Settings`` or the storage's), its gate loaded with
    ``backends`` (``embedder=``, ``chat=``, ... as ``load_gate`` takes them) and its
    settings. ``GateLoadError`` names what is missing or malformed."""
    folder = Path(persist_dir)
    settings = read_json_file(folder, ENGINE_FILE)
    if not isinstance(settings, dict) or settings.get("format") != _FORMAT:
        raise GateLoadError(f"{folder / ENGINE_FILE}: not the settings of a persisted gated engine")
    top_k, reuse_draft = settings.get("similarity_top_k"), settings.get("reuse_draft")
    if not (top_k is None or (isinstance(top_k, int) and not isinstance(top_k, bool) and top_k >= 1)):
        raise GateLoadError(f"{folder / ENGINE_FILE}: field 'similarity_top_k' must be a positive int or null")
    if not isinstance(reuse_draft, bool):
        raise GateLoadError(f"{folder / ENGINE_FILE}: field 'reuse_draft' must be true or false")
    index = load_index_from_storage(StorageContext.from_defaults(persist_dir=str(folder)))
    gate = load_gate(folder / GATE_DIR, **backends)
    return AdaptiveQueryEngine.from_index(index, gate, llm=llm, similarity_top_k=top_k, reuse_draft=reuse_draft)
