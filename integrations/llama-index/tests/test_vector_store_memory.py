"""VectorStoreMemory: the SKR memory in a real SimpleVectorStore, holding the embedded
MiniLM's vectors, decides as the faiss memory does on the same real data, refuses a
store it does not own, and comes back over its persisted store in a new process."""

from __future__ import annotations

import logging
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from llama_index.core.schema import TextNode
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.core.vector_stores.types import BasePydanticVectorStore
from llama_index.vector_stores.adaptive_gates import LABEL_KEY, VectorStoreMemory
from pydantic import Field

from adaptive_gates import GateLoadError, SKRKnnGate, StoreContentError
from adaptive_gates.memory.memories import FaissMemory, SKRMemory, l2_normalise
from support.restart_checks import (  # the core suite's (pythonpath in pyproject.toml)
    check_a_saved_gate_decides_the_same_after_a_restart,
    run_in_new_process,
)

N_MEMORY = 200  # questions in the memory; the next ones are asked
N_ASKED = 40


@pytest.fixture(scope="module")
def labelled_questions() -> tuple[list[str], list[int]]:
    """Real questions with real self-knowledge labels (1 = retrieve): the packaged
    AdaRAGUE NQ outcome records (Llama-3.1-8B) labelled by ``label_outcomes``."""
    from adaptive_gates.bundled.datasets import adarague_outcomes
    from adaptive_gates.records.selfknowledge import label_outcomes

    knowledge = label_outcomes(adarague_outcomes("nq"))
    unique = dict(
        zip(knowledge.questions, knowledge.labels)
    )  # a repeated question would tie in similarity, in any order
    return list(unique), list(unique.values())


@pytest.fixture(scope="module")
def split(labelled_questions):
    questions, labels = labelled_questions
    assert len(questions) > N_MEMORY + N_ASKED, "the data holds too few labelled questions"
    return (questions[:N_MEMORY], labels[:N_MEMORY]), questions[N_MEMORY : N_MEMORY + N_ASKED]


class OpaqueStore(BasePydanticVectorStore):
    """A store whose vectors cannot be read back, as most remote stores: it searches
    a ``SimpleVectorStore`` inside."""

    stores_text: bool = False
    inner: SimpleVectorStore = Field(default_factory=SimpleVectorStore)

    @property
    def client(self) -> None:
        return None

    def add(self, nodes, **kwargs):
        return self.inner.add(nodes)

    def delete(self, ref_doc_id, **kwargs):
        self.inner.delete(ref_doc_id)

    def query(self, query, **kwargs):
        return self.inner.query(query)


def test_decides_as_the_faiss_memory_on_real_data(split, core_embedder):
    (questions, labels), asked = split
    options = {"k": 10, "weighting": "similarity"}  # graded scores, so they are compared too
    faiss_gate = SKRKnnGate(core_embedder, **options).fit(questions, labels)
    store_gate = SKRKnnGate(core_embedder, memory=VectorStoreMemory.factory(SimpleVectorStore), **options)
    store_gate.fit(questions, labels)
    assert isinstance(faiss_gate.memory_, FaissMemory) and isinstance(store_gate.memory_, VectorStoreMemory)
    assert store_gate.memory_.counts == faiss_gate.memory_.counts
    assert len(store_gate.memory_.store.data.embedding_dict) == N_MEMORY  # the store holds the memory

    expected, got = faiss_gate.decide_batch(asked), store_gate.decide_batch(asked)
    assert not any(d.is_fallback for d in got)
    assert [d.retrieve for d in got] == [d.retrieve for d in expected]
    assert any(d.retrieve for d in expected) and not all(d.retrieve for d in expected)
    np.testing.assert_allclose([d.score for d in got], [d.score for d in expected], atol=1e-6)
    for g, e in zip(got, expected):
        # SimpleVectorStore scores by cosine similarity: faiss's inner product of
        # L2-normalised vectors, neighbour by neighbour.
        g_neighbours, e_neighbours = g.details["neighbours"], e.details["neighbours"]
        assert [n["question"] for n in g_neighbours] == [n["question"] for n in e_neighbours]
        assert [n["label"] for n in g_neighbours] == [n["label"] for n in e_neighbours]
        np.testing.assert_allclose(
            [n["similarity"] for n in g_neighbours], [n["similarity"] for n in e_neighbours], atol=1e-6
        )


def test_keeps_learning_and_lists_its_entries(split, core_embedder):
    (questions, labels), asked = split
    memory = VectorStoreMemory.factory(SimpleVectorStore)(core_embedder.dimension)
    assert isinstance(memory, SKRMemory)
    gate = SKRKnnGate(core_embedder, k=1, memory=lambda d: memory).fit(questions[:20], labels[:20])
    gate.add([asked[0]], [1])
    assert len(memory) == 21 and memory.counts == (20 - sum(labels[:20]), sum(labels[:20]) + 1)
    # The question itself is now its own nearest neighbour, labelled unknown.
    assert gate.decide(asked[0]).details["neighbours"][0] == {
        "question": asked[0],
        "label": "unknown",
        "similarity": pytest.approx(1.0, abs=1e-5),
    }
    vectors, stored_labels, stored_questions = memory.entries()
    assert stored_questions == [*questions[:20], asked[0]] and list(stored_labels) == [*labels[:20], 1]
    np.testing.assert_allclose(vectors, l2_normalise(core_embedder.embed(stored_questions)), atol=1e-6)
    # Each node carries its label for whoever reads the store.
    assert [m[LABEL_KEY] for m in memory.store.data.metadata_dict.values()] == [*labels[:20], 1]


def test_refuses_bad_additions(core_embedder):
    memory = VectorStoreMemory(SimpleVectorStore(), core_embedder.dimension)
    questions = ["Who wrote Hamlet?", "What is the capital of France?"]
    vectors = core_embedder.embed(questions)
    with pytest.raises(ValueError, match="shape"):
        memory.add(vectors[:1], [0, 1], questions)
    with pytest.raises(ValueError, match=r"labels of 0 \(known\) or 1"):
        memory.add(vectors, [0, 2], questions)
    assert len(memory) == 0 and not memory.store.data.embedding_dict
    sims, labels, texts = memory.search(vectors, 3)
    assert sims.shape == labels.shape == (2, 0) and texts == [[], []]


def test_the_documents_store_is_refused_at_fit(index, core_embedder):
    """The documents' own store (``index.vector_store``) is refused when the gate is
    fitted, before any question is added to it, saying to give the memory its own."""
    documents = index.vector_store
    held = dict(documents.data.embedding_dict)
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: documents))
    with pytest.raises(StoreContentError, match=r"already holds entries this memory did not add.*of its own"):
        gate.fit(["Who painted the Mona Lisa?", "What did the report published yesterday conclude?"], [0, 1])
    assert documents.data.embedding_dict == held and not gate.is_fitted


def test_a_store_written_to_later_gives_a_clear_fallback(core_embedder, caplog):
    store = SimpleVectorStore()
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: store))
    gate.fit(["Who painted the Mona Lisa?", "What did the report published yesterday conclude?"], [0, 1])
    paragraph = TextNode(text="Hamlet is a tragedy written by William Shakespeare.")
    paragraph.embedding = core_embedder.embed(["Who wrote Hamlet?"])[0].tolist()
    store.add([paragraph])
    with pytest.raises(StoreContentError, match=f"{paragraph.node_id}.*did not add.*{LABEL_KEY}.*questions only"):
        gate.memory_.search(core_embedder.embed(["Who wrote Hamlet?"]), 1)
    # Within a gate, the failure is the recorded fallback decision, logged without a traceback.
    with caplog.at_level(logging.WARNING, logger="adaptive_gates"):
        decision = gate.decide("Who wrote Hamlet?")
    assert decision.is_fallback and decision.retrieve and paragraph.node_id in decision.error
    assert caplog.records and not any(record.exc_info for record in caplog.records)


#: A new process: the persisted store and the saved gate, attached, decide the questions.
_RESTART = """
import json, sys
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.vector_stores.adaptive_gates import VectorStoreMemory
from adaptive_gates import GateLoadError, SKRKnnGate, StoreContentError
from adaptive_gates.models import default_embedder

store_file, gate_dir, questions = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
store = SimpleVectorStore.from_persist_path(store_file)
gate = SKRKnnGate.load(gate_dir, embedder=default_embedder(), memory=VectorStoreMemory.attach(store))
decisions = [d.to_dict() for d in gate.decide_batch(questions)]
print(json.dumps({"decisions": decisions, "entries": len(store.data.embedding_dict)}))
"""


def test_a_saved_gate_reattaches_to_its_persisted_store_after_a_restart(split, core_embedder, tmp_path):
    store = SimpleVectorStore()
    check_a_saved_gate_decides_the_same_after_a_restart(
        VectorStoreMemory.factory(lambda: store), store.persist, _RESTART, split, core_embedder, tmp_path
    )


def test_loading_refuses_a_store_that_lacks_the_nodes(core_embedder, tmp_path):
    store = SimpleVectorStore()
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: store))
    gate.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])
    store.persist(str(tmp_path / "store.json"))  # persisted before the last add
    gate.add(["Who painted the Mona Lisa?"], [0])
    gate.save(tmp_path / "gate")
    late = gate.memory_._ids[-1]
    reloaded = SimpleVectorStore.from_persist_path(str(tmp_path / "store.json"))
    with pytest.raises(GateLoadError, match=f"lacks 1 of the 3 questions.*{late}.*persisted after its last add"):
        SKRKnnGate.load(tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(reloaded))
    with pytest.raises(GateLoadError, match="lacks 3 of the 3"):
        SKRKnnGate.load(tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(SimpleVectorStore()))
    # A store that scores otherwise is not silently read as cosine similarity.
    with pytest.raises(GateLoadError, match=r"'cosine'.*similarity='cosine'"):
        SKRKnnGate.load(
            tmp_path / "gate",
            embedder=core_embedder,
            memory=VectorStoreMemory.attach(store, similarity="cosine-distance"),
        )
    # Fitting the loaded gate again would duplicate its questions in the store: refused.
    loaded = SKRKnnGate.load(tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(store))
    with pytest.raises(StoreContentError, match="already holds the questions this gate's memory added before"):
        loaded.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])
    assert len(store.data.embedding_dict) == 3


#: A new process: the persisted store and the saved gate, attached, fitted again.
_REFIT = """
import json, sys
from llama_index.core.vector_stores import SimpleVectorStore
from llama_index.vector_stores.adaptive_gates import VectorStoreMemory
from adaptive_gates import SKRKnnGate, StoreContentError
from adaptive_gates.models import default_embedder

store = SimpleVectorStore.from_persist_path(sys.argv[1])
gate = SKRKnnGate.load(sys.argv[2], embedder=default_embedder(), memory=VectorStoreMemory.attach(store))
try:
    gate.fit(["Who painted the Mona Lisa?", "What did the report published yesterday conclude?"], [0, 1])
except StoreContentError as exc:
    print(json.dumps({"refused": str(exc), "entries": len(store.data.embedding_dict)}))
"""


def test_refitting_after_a_restart_names_the_gates_own_questions(core_embedder, tmp_path):
    """The store's entries were added by this gate in an earlier process: the refusal says
    so (not that the memory did not add them), and the way to grow the memory."""
    store = SimpleVectorStore()
    gate = SKRKnnGate(core_embedder, k=1, memory=VectorStoreMemory.factory(lambda: store))
    gate.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])
    with pytest.raises(StoreContentError, match="already holds the questions this gate's memory added before"):
        gate.fit(["Who wrote Hamlet?", "What was the population of Tuvalu in 2021?"], [0, 1])  # in this process too
    store.persist(str(tmp_path / "store.json"))
    gate.save(tmp_path / "gate")
    refit = run_in_new_process(_REFIT, str(tmp_path / "store.json"), str(tmp_path / "gate"))
    assert "this gate's memory added before" in refit["refused"] and "did not add" not in refit["refused"]
    assert "gate.add(questions, labels)" in refit["refused"] and refit["entries"] == 2


def test_an_unnamed_similarity_must_be_passed_again(core_embedder, tmp_path):
    def inner_product(score: float) -> float:
        return score

    store = SimpleVectorStore()
    memory = VectorStoreMemory.factory(lambda: store, similarity=inner_product)
    SKRKnnGate(core_embedder, k=1, memory=memory).fit(["Who wrote Hamlet?", "When was he born?"], [0, 1]).save(
        tmp_path / "gate"
    )
    with pytest.raises(GateLoadError, match="no name; pass the same function"):
        SKRKnnGate.load(tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(store))
    loaded = SKRKnnGate.load(
        tmp_path / "gate", embedder=core_embedder, memory=VectorStoreMemory.attach(store, similarity=inner_product)
    )
    assert loaded.decide("Who wrote Hamlet?").details["neighbours"][0]["question"] == "Who wrote Hamlet?"


def test_unsupported_operations_say_so(core_embedder):
    with pytest.raises(NotImplementedError, match="cannot list the vectors of a OpaqueStore"):
        VectorStoreMemory(OpaqueStore(), core_embedder.dimension).entries()
    with pytest.raises(TypeError, match="BasePydanticVectorStore"):
        VectorStoreMemory(FaissMemory(core_embedder.dimension), core_embedder.dimension)
    with pytest.raises(ValueError, match="dimension"):
        VectorStoreMemory(SimpleVectorStore(), 0)
    with pytest.raises(ValueError, match="similarity must be one of"):
        VectorStoreMemory.factory(SimpleVectorStore, similarity="dot")


def test_adds_while_others_search(labelled_questions, core_embedder):
    questions, labels = labelled_questions
    questions, labels = questions[:120], labels[:120]
    vectors = core_embedder.embed(questions)
    pairs = set(zip(questions, labels))
    memory = VectorStoreMemory(SimpleVectorStore(), core_embedder.dimension)
    memory.add(vectors[:10], labels[:10], questions[:10])
    done = threading.Event()

    def writer() -> None:
        for i in range(10, len(questions)):
            memory.add(vectors[i : i + 1], labels[i : i + 1], questions[i : i + 1])
        done.set()

    def reader(i: int) -> int:
        checked = 0
        while not done.is_set() or checked < 20:
            sims, found, texts = memory.search(vectors[i : i + 1], 5)
            assert set(zip(texts[0], found[0].tolist())) <= pairs  # every hit is a stored pair
            assert np.all(np.diff(sims[0]) <= 1e-6) and texts[0][0] == questions[i]  # itself first
            checked += 1
        return checked

    switch = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # threads interleave often, so a missing lock shows
    try:
        with ThreadPoolExecutor(max_workers=4) as pool:
            readers = [pool.submit(reader, i) for i in range(3)]
            pool.submit(writer).result()
            assert all(r.result() >= 20 for r in readers)
    finally:
        sys.setswitchinterval(switch)
    assert len(memory) == len(memory.store.data.embedding_dict) == len(questions)
    assert memory.counts == (len(labels) - sum(labels), sum(labels))
