"""VectorStoreMemory: the SKR memory in a real InMemoryVectorStore, encoded by the
embedded MiniLM, decides as the faiss memory does on the same real data."""

import numpy as np
import pytest
from adaptive_gates import SKRKnnGate
from adaptive_gates.gates.skr_memory import FaissMemory, SKRMemory, l2_normalise
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from langchain_adaptive_gates import AdaptiveGatesEmbeddings, VectorStoreMemory

N_MEMORY = 200  # questions in the memory; the next ones are asked


@pytest.fixture(scope="module")
def split(labelled_questions):
    questions, labels = labelled_questions
    assert len(questions) > N_MEMORY + 40, "the data holds too few labelled questions"
    return (questions[:N_MEMORY], labels[:N_MEMORY]), questions[N_MEMORY : N_MEMORY + 40]


def _store_memory(core_embedder):
    return VectorStoreMemory.factory(lambda: InMemoryVectorStore(AdaptiveGatesEmbeddings(core_embedder)))


def test_decides_as_the_faiss_memory_on_real_data(split, core_embedder):
    (questions, labels), asked = split
    options = {"k": 10, "weighting": "similarity"}  # graded scores, so they are compared too
    faiss_gate = SKRKnnGate(core_embedder, **options).fit(questions, labels)
    store_gate = SKRKnnGate(core_embedder, memory=_store_memory(core_embedder), **options).fit(questions, labels)
    assert isinstance(faiss_gate.memory_, FaissMemory) and isinstance(store_gate.memory_, VectorStoreMemory)
    assert store_gate.memory_.counts == faiss_gate.memory_.counts

    expected, got = faiss_gate.decide_batch(asked), store_gate.decide_batch(asked)
    assert [d.retrieve for d in got] == [d.retrieve for d in expected]
    assert any(d.retrieve for d in expected) and not all(d.retrieve for d in expected)
    np.testing.assert_allclose([d.score for d in got], [d.score for d in expected], atol=1e-6)
    for g, e in zip(got, expected):
        # The store's relevance score is cosine similarity: faiss's inner product of
        # L2-normalised vectors, neighbour by neighbour.
        g_neighbours, e_neighbours = g.details["neighbours"], e.details["neighbours"]
        assert [n["question"] for n in g_neighbours] == [n["question"] for n in e_neighbours]
        assert [n["label"] for n in g_neighbours] == [n["label"] for n in e_neighbours]
        np.testing.assert_allclose(
            [n["similarity"] for n in g_neighbours], [n["similarity"] for n in e_neighbours], atol=1e-6
        )


def test_keeps_learning_and_lists_its_entries(split, core_embedder):
    (questions, labels), asked = split
    memory = _store_memory(core_embedder)(core_embedder.dimension)
    assert isinstance(memory, SKRMemory)
    gate = SKRKnnGate(core_embedder, k=1, memory=lambda d: memory).fit(questions[:20], labels[:20])
    gate.add([asked[0]], [1])
    assert len(memory) == 21 and memory.counts == (20 - sum(labels[:20]), sum(labels[:20]) + 1)
    # The question itself is now its own nearest neighbour, labelled unknown.
    assert gate.decide(asked[0]).details["neighbours"][0]["question"] == asked[0]
    vectors, stored_labels, stored_questions = memory.entries()
    assert stored_questions == questions[:20] + [asked[0]] and list(stored_labels) == labels[:20] + [1]
    np.testing.assert_allclose(vectors, l2_normalise(core_embedder.embed(stored_questions)), atol=1e-6)


def test_unsupported_operations_say_so(core_embedder, tmp_path):
    memory = _store_memory(core_embedder)(core_embedder.dimension)
    with pytest.raises(NotImplementedError, match="persists itself"):
        memory.save(tmp_path)

    class NoVectorSearch(InMemoryVectorStore):
        similarity_search_with_score_by_vector = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="cannot search by vector"):
        VectorStoreMemory(NoVectorSearch(AdaptiveGatesEmbeddings(core_embedder)), core_embedder.dimension)


def test_a_store_of_another_width_is_refused(core_embedder):
    class Tiny(Embeddings):
        def embed_documents(self, texts):
            return [[1.0, float(len(t))] for t in texts]

        def embed_query(self, text):
            return self.embed_documents([text])[0]

    memory = VectorStoreMemory(InMemoryVectorStore(Tiny()), core_embedder.dimension)
    vectors = core_embedder.embed(["Who wrote Hamlet?"])
    with pytest.raises(ValueError, match="2-d vectors"):
        memory.add(vectors, [0], ["Who wrote Hamlet?"])
    assert len(memory) == 0
