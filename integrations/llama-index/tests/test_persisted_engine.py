"""A gated engine persisted beside its index's ``StorageContext`` and loaded back from
the files alone: a real ``VectorStoreIndex`` over real paragraphs, the real kNN gate,
the embedded models; the loaded engine decides and retrieves as the one persisted."""

from __future__ import annotations

import json

import pytest
from llama_index.query_engine.adaptive_gates import (
    ENGINE_FILE,
    GATE_DIR,
    AdaptiveQueryEngine,
    load_gated_engine,
    persist_gated_index,
)

from adaptive_gates import GateLoadError

from .conftest import KNOWN, UNKNOWN

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ASKED = [KNOWN[0], UNKNOWN[0], "Is Barq's root beer a Pepsi product?"]


def _seen(engine: AdaptiveQueryEngine) -> list[tuple]:
    """Per question: the decision's route and score, and the nodes retrieved (no LLM call)."""
    seen = []
    for question in ASKED:
        decision = engine.gate.decide(question)
        nodes = engine.retriever.retrieve(question) if decision.retrieve else []
        seen.append((decision.retrieve, decision.score, [n.node.node_id for n in nodes]))
    return seen


def test_a_persisted_engine_loads_back_deciding_and_retrieving_the_same(index, knn_gate, core_embedder, tmp_path):
    persisted = AdaptiveQueryEngine.from_index(index, knn_gate, similarity_top_k=2, reuse_draft=False)
    folder = persist_gated_index(index, knn_gate, tmp_path / "storage", similarity_top_k=2, reuse_draft=False)
    assert {"docstore.json", "index_store.json", GATE_DIR, ENGINE_FILE} <= {p.name for p in folder.iterdir()}
    loaded = load_gated_engine(folder, embedder=core_embedder)
    assert _seen(loaded) == _seen(persisted)
    assert loaded.retriever.similarity_top_k == 2 and loaded._reuse_draft is False
    response = loaded.query(UNKNOWN[0])
    assert response.metadata["gate_route"] == "retrieve" and len(response.source_nodes) == 2


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"format": 9}, "not the settings of a persisted gated engine"),
        ({"format": 1, "similarity_top_k": 0, "reuse_draft": True}, "'similarity_top_k' must be a positive int"),
        ({"format": 1, "similarity_top_k": 2, "reuse_draft": "yes"}, "'reuse_draft' must be true or false"),
    ],
)
def test_malformed_engine_settings_are_refused_naming_the_field(
    index, knn_gate, core_embedder, tmp_path, settings, message
):
    folder = persist_gated_index(index, knn_gate, tmp_path / "storage")
    (folder / ENGINE_FILE).write_text(json.dumps(settings))
    with pytest.raises(GateLoadError, match=message):
        load_gated_engine(folder, embedder=core_embedder)
