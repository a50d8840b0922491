"""``AdaptiveRAGPack`` over real paragraphs with the embedded models and the gate the
core ships fitted: its parts, and answers routed as the gate decides."""

from __future__ import annotations

import pytest
from llama_index.packs.adaptive_gates import AdaptiveRAGPack

from adaptive_gates import StackedGate

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def pack(paragraphs, llm, embed_model) -> AdaptiveRAGPack:
    return AdaptiveRAGPack(paragraphs[:10], llm=llm, embed_model=embed_model, similarity_top_k=1)


async def test_the_pack_answers_as_its_shipped_gate_decides(pack):
    modules = pack.get_modules()
    assert set(modules) == {"index", "gate", "query_engine"} and isinstance(modules["gate"], StackedGate)
    questions = ("Who wrote Hamlet?", "Is Barq's root beer a Pepsi product?")
    assert [pack.gate.decide(q).retrieve for q in questions] == [False, True]  # one of each route
    for question in questions:
        decision = pack.gate.decide(question)
        response = pack.run(question)
        again = await pack.arun(question)
        for answered in (response, again):
            assert answered.metadata["gate_decision"]["retrieve"] is decision.retrieve
            assert len(answered.source_nodes) == (1 if decision.retrieve else 0)
