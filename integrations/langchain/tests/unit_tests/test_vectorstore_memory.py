"""VectorStoreMemory: the SKR memory in real LangChain vector stores (InMemoryVectorStore,
langchain-community's FAISS by inner product and by squared L2), encoded by the
embedded MiniLM, decides as the core's faiss memory does on the same real data, refuses
a store it does not own, and comes back over its dumped store in a new process."""

import logging

import numpy as np
import pytest
from langchain_core.embeddings import Embeddings
from langchain_core.vectorstores import InMemoryVectorStore

from adaptive_gates import GateLoadError, SKRKnnGate, StoreContentError
from adaptive_gates.memory.memories import FaissMemory, SKRMemory, l2_normalise
from adaptive_gates.models.embedding.cached import CachedEmbedder
from langchain_adaptive_gates import LABEL_KEY, AdaptiveGatesEmbeddings, VectorStoreMemory
from support.restart_checks import (  # the core suite's (pythonpath in pyproject.toml)
    check_a_saved_gate_decides_the_same_after_a_restart,
    run_in_new_process,
)

from ..stores import faiss_store

N_MEMORY = 200  # questions in the memory; the next ones are asked

#: Each store with what turns its score into cosine similarity (None: it is one).
#: FAISS's default squared L2 distance d of normalised vectors is 2 - 2 cos.
STORES = {
    "in-memory": (lambda embeddings, dimension: InMemoryVectorStore(embeddings), None),
    "faiss-inner-product": (faiss_store, None),
    "faiss-l2": (
        lambda embeddings, dimension: faiss_store(embeddings, dimension, inner_product=False),
        lambda d: 1 - d / 2,
    ),
}


@pytest.fixture(scope="module")
def split(labelled_questions):
    questions, labels = labelled_questions
    assert len(questions) > N_MEMORY + 40, "the data holds too few labelled questions"
    return (questions[:N_MEMORY], labels[:N_MEMORY]), questions[N_MEMORY : N_MEMORY + 40]


@pytest.fixture(scope="module")
def memo_embedder(core_embedder):
    """The embedded MiniLM behind a memo: the gates compared embed the same 200 real
    questions, which need go through the model only once."""
    return CachedEmbedder(core_embedder)


def _store_memory(core_embedder, kind="in-memory"):
    make_store, similarity = STORES[kind]
    embeddings = AdaptiveGatesEmbeddings(core_embedder)
    options = {} if similarity is None else {"similarity": similarity}
    return VectorStoreMemory.factory(lambda: make_store(embeddings, core_embedder.dimension), **options)


@pytest.mark.parametrize("kind", list(STORES))
def test_decides_as_the_faiss_memory_on_real_data(kind, split, core_embedder, memo_embedder):
    (questions, labels), asked = split
    options = {"k": 10, "weighting": "similarity"}  # graded scores, so they are compared too
    faiss_gate = SKRKnnGate(memo_embedder, **options).fit(questions, labels)
    # A store that embeds the questions itself does so through the model.
    memory = _store_memory(core_embedder, kind)
    store_gate = SKRKnnGate(memo_embedder, memory=memory, **options).fit(questions, labels)
    assert isinstance(faiss_gate.memory_, FaissMemory) and isinstance(store_gate.memory_, VectorStoreMemory)
    assert store_gate.memory_.counts == faiss_gate.memory_.counts

    expected, got = faiss_gate.decide_batch(asked), store_gate.decide_batch(asked)
    assert [d.retrieve for d in got] == [d.retrieve for d in expected]
    assert any(d.retrieve for d in expected) and not all(d.retrieve for d in expected)
    np.testing.assert_allclose([d.score for d in got], [d.score for d in expected], atol=1e-6)
    for g, e in zip(got, expected):
        # The store's score, turned into cosine similarity, is faiss's inner product
        # of L2-normalised vectors, neighbour by neighbour.
        g_neighbours, e_neighbours = g.details["neighbours"], e.details["neighbours"]
        assert [n["question"] for n in g_neighbours] == [n["question"] for n in e_neighbours]
        assert [n["label"] for n in g_neighbours] == [n["label"] for n in e_neighbours]
        np.testing.assert_allclose(
            [n["similarity"] for n in g_neighbours], [n["similarity"] for n in e_neighbours], atol=1e-6
        )


@pytest.mark.parametrize("kind", list(STORES))
def test_keeps_learning(kind, split, core_embedder):
    (questions, labels), asked = split
    memory = _store_memory(core_embedder, kind)(core_embedder.dimension)
    assert isinstance(memory, SKRMemory)
    gate = SKRKnnGate(core_embedder, k=1, memory=lambda d: memory).fit(questions[:20], labels[:20])
    gate.add([asked[0]], [1])
    assert len(memory) == 21 and memory.counts == (20 - sum(labels[:20]), sum(labels[:20]) + 1)
    # The question itself is now its own nearest neighbour, labelled unknown.
    (nearest, *_) = gate.decide(asked[0]).details["neighbours"]
    assert nearest["question"] == asked[0] and nearest["label"] == "unknown"
    assert nearest["similarity"] == pytest.approx(1.0, abs=1e-5)


def test_an_in_memory_store_lists_its_entries(split, core_embedder):
    (questions, labels), asked = split
    memory = _store_memory(core_embedder)(core_embedder.dimension)
    SKRKnnGate(core_embedder, k=1, memory=lambda d: memory).fit(questions[:20], labels[:20]).add([asked[0]], [1])
    vectors, stored_labels, stored_questions = memory.entries()
    assert stored_questions == [*questions[:20], asked[0]] and list(stored_labels) == [*labels[:20], 1]
    np.testing.assert_allclose(vectors, l2_normalise(core_embedder.embed(stored_questions)), atol=1e-6)


def test_unsupported_operations_say_so(core_embedder):
    faiss_memory = _store_memory(core_embedder, "faiss-inner-product")(core_embedder.dimension)
    with pytest.raises(NotImplementedError, match="cannot list the vectors of a FAISS"):
        faiss_memory.entries()

    class NoVectorSearch(InMemoryVectorStore):
        similarity_search_with_score_by_vector = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match="cannot search by vector"):
        VectorStoreMemory(NoVectorSearch(AdaptiveGatesEmbeddings(core_embedder)), core_embedder.dimension)
    with pytest.raises(ValueError, match="similarity must be one of"):
        VectorStoreMemory.factory(lambda: None, similarity="dot")


@pytest.mark.parametrize("kind", list(STORES))
def test_a_store_holding_documents_is_refused_at_fit(kind, core_embedder):
    """A store that already holds documents (the documents' own, say) is refused when
    the gate is fitted, before any question is added to it."""
    make_store, _ = STORES[kind]
    documents = make_store(AdaptiveGatesEmbeddings(core_embedder), core_embedder.dimension)
    [doc_id] = documents.add_texts(["Hamlet is a tragedy written by William Shakespeare."])
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: documents))
    with pytest.raises(StoreContentError, match=f"already holds entries this memory did not add.*{doc_id}.*of its own"):
        gate.fit(["Who painted the Mona Lisa?", "What did the report published yesterday conclude?"], [0, 1])
    assert len(documents.similarity_search_with_score_by_vector(core_embedder.embed(["x"])[0].tolist(), k=5)) == 1
    assert not gate.is_fitted


def test_a_store_written_to_later_gives_a_clear_fallback(core_embedder, caplog):
    store = InMemoryVectorStore(AdaptiveGatesEmbeddings(core_embedder))
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: store))
    gate.fit(["Who painted the Mona Lisa?", "What did the report published yesterday conclude?"], [0, 1])
    # Another memory's labelled question is no neighbour of this one either.
    [other] = store.add_texts(["Who wrote Hamlet?"], metadatas=[{LABEL_KEY: 0}])
    with caplog.at_level(logging.WARNING, logger="adaptive_gates"):
        decision = gate.decide("Who wrote Hamlet?")
    assert decision.is_fallback and decision.retrieve
    assert f"returned {other!r}, which this memory did not add" in decision.error
    assert caplog.records and not any(record.exc_info for record in caplog.records)


#: A new process: the dumped store and the saved gate, attached, decide the questions.
_RESTART = """
import json, sys
from langchain_core.vectorstores import InMemoryVectorStore
from adaptive_gates import GateLoadError, SKRKnnGate, StoreContentError
from adaptive_gates.models import default_embedder
from langchain_adaptive_gates import LABEL_KEY, AdaptiveGatesEmbeddings, VectorStoreMemory

store_file, gate_dir, questions = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
embedder = default_embedder()
store = InMemoryVectorStore.load(store_file, AdaptiveGatesEmbeddings(embedder))
gate = SKRKnnGate.load(gate_dir, embedder=embedder, memory=VectorStoreMemory.attach(store))
decisions = [d.to_dict() for d in gate.decide_batch(questions)]
print(json.dumps({"decisions": decisions, "entries": len(store.store)}))
"""


def test_a_saved_gate_reattaches_to_its_dumped_store_after_a_restart(split, core_embedder, tmp_path):
    store = InMemoryVectorStore(AdaptiveGatesEmbeddings(core_embedder))
    check_a_saved_gate_decides_the_same_after_a_restart(
        VectorStoreMemory.factory(lambda: store), store.dump, _RESTART, split, core_embedder, tmp_path
    )


def test_loading_checks_the_store_and_its_scores(core_embedder, tmp_path):
    store = faiss_store(AdaptiveGatesEmbeddings(core_embedder), core_embedder.dimension, inner_product=False)
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: store, similarity="squared-l2"))
    gate.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])
    gate.save(tmp_path / "gate")
    expected = gate.decide("Who wrote Macbeth?")
    # The squared L2 distances are not silently read as cosine similarities.
    with pytest.raises(GateLoadError, match=r"'squared-l2'.*similarity='squared-l2'"):
        SKRKnnGate.load(tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(store))
    empty = InMemoryVectorStore(AdaptiveGatesEmbeddings(core_embedder))
    with pytest.raises(GateLoadError, match=r"lacks 2 of the 2 questions.*persisted after its last add"):
        SKRKnnGate.load(
            tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(empty, similarity="squared-l2")
        )
    loaded = SKRKnnGate.load(
        tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(store, similarity="squared-l2")
    )
    assert loaded.decide("Who wrote Macbeth?").details == expected.details


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


class _NeverEmbeds(Embeddings):
    """Embeddings a store must not be asked for: the gate gives it vectors."""

    def embed_documents(self, texts):
        raise AssertionError(f"the store embedded {len(texts)} text(s) the gate had already embedded")

    def embed_query(self, text):
        raise AssertionError("the store embedded a query the gate had already embedded")


@pytest.mark.parametrize("inner_product", [True, False])
def test_a_store_that_takes_vectors_gets_the_gates_own(inner_product, split, memo_embedder):
    """FAISS takes vectors (``add_embeddings``): fitting, deciding and learning online
    embed each question once, with the gate's embedder, and decide as the faiss memory."""
    (questions, labels), asked = split
    options = {} if inner_product else {"similarity": lambda d: 1 - d / 2}
    memory = VectorStoreMemory.factory(
        lambda: faiss_store(_NeverEmbeds(), memo_embedder.dimension, inner_product=inner_product), **options
    )
    store_gate = SKRKnnGate(memo_embedder, k=10, weighting="similarity", memory=memory).fit(questions, labels)
    faiss_gate = SKRKnnGate(memo_embedder, k=10, weighting="similarity").fit(questions, labels)
    np.testing.assert_allclose(
        [d.score for d in store_gate.decide_batch(asked)], [d.score for d in faiss_gate.decide_batch(asked)], atol=1e-6
    )
    for gate in (store_gate, faiss_gate):
        gate.record_feedback(asked[0], retrieved=False, correct=False)
    assert store_gate.memory_.counts == faiss_gate.memory_.counts
    assert store_gate.decide(asked[0]).score == pytest.approx(faiss_gate.decide(asked[0]).score, abs=1e-6)


#: An SKR gate deciding over a FAISS memory, then what it imported: tiktoken fetches its
#: encodings from the web on first use, so it must not be on this offline path.
_FAISS_PATH = """
import json, sys
import faiss
from adaptive_gates import GateLoadError, SKRKnnGate, StoreContentError
from adaptive_gates.models import default_embedder
from langchain_community.docstore.in_memory import InMemoryDocstore
from langchain_community.vectorstores import FAISS
from langchain_community.vectorstores.utils import DistanceStrategy
from langchain_adaptive_gates import LABEL_KEY, AdaptiveGatesEmbeddings, VectorStoreMemory

embedder = default_embedder()
store = FAISS(AdaptiveGatesEmbeddings(embedder), faiss.IndexFlatIP(embedder.dimension), InMemoryDocstore(), {},
              distance_strategy=DistanceStrategy.MAX_INNER_PRODUCT)
gate = SKRKnnGate(embedder, k=1, memory=VectorStoreMemory.factory(lambda: store))
gate.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])
tiktoken = sorted(m for m in sys.modules if m.split(".")[0] == "tiktoken")
print(json.dumps([gate.decide("Who wrote Macbeth?").retrieve, tiktoken]))
"""


def test_the_faiss_path_needs_no_network_library():
    assert run_in_new_process(_FAISS_PATH) == [False, []]
