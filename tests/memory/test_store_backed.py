"""The SKR memory over a vector store: what every framework's memory inherits.

The base is meant to be subclassed by a framework package (LangChain's and LlamaIndex's
``VectorStoreMemory``); here it is subclassed over faiss's own id-mapped index, a real
vector store that persists itself (``faiss.write_index``), and driven through the
SKR-kNN gate over the real MiniLM.
"""

from __future__ import annotations

import math
from typing import ClassVar

import faiss
import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError, StoreContentError
from adaptive_gates.gates import SKRKnnGate
from adaptive_gates.memory.memories import l2_normalise
from adaptive_gates.memory.store_backed import (
    SIMILARITIES,
    StoreBackedMemory,
    StoreMemoryFactory,
    cosine_distance,
    same_score,
    squared_l2,
)
from adaptive_gates.records.selfknowledge import label_outcomes

DIM = 384


class IdMapMemory(StoreBackedMemory):
    """A store-backed memory over ``faiss.IndexIDMap2`` (inner product: cosine of unit vectors)."""

    kind: ClassVar[str] = "faiss-idmap"
    store_type: ClassVar[type] = faiss.IndexIDMap2
    store_description: ClassVar[str] = "a faiss IndexIDMap2"

    def _put(self, vectors, labels, questions):
        start = int(faiss.vector_to_array(self.store.id_map).max(initial=-1)) + 1
        ids = np.arange(start, start + len(questions), dtype=np.int64)
        self.store.add_with_ids(vectors, ids)
        return [str(i) for i in ids]

    def _probe(self, vector):
        _, found = self.store.search(np.asarray([vector], dtype=np.float32), 1)
        return [str(i) for i in found[0] if i >= 0]

    def _present(self, ids):
        return {str(i) for i in faiss.vector_to_array(self.store.id_map)}

    def _stored_vectors(self):
        return [self.store.reconstruct(int(i)).tolist() for i in self._ids]

    def search(self, vectors, k):
        queries = l2_normalise(vectors)
        with self._lock:
            k = min(k, len(self._questions))
            scores, found = self.store.search(queries, k)
            rows = []
            for row in found:
                ids = [str(i) for i in row]
                foreign = next((i for i in ids if i not in self._positions), None)
                if foreign is not None:
                    raise self._foreign(foreign)
                rows.append([self._positions[i] for i in ids])
        sims = np.vectorize(self._similarity, otypes=[np.float32])(scores) if k else scores
        labels = self._labels[np.asarray(rows, dtype=np.int64).reshape(len(queries), k)]
        return sims, labels, [[self._questions[j] for j in row] for row in rows]


def _store(dimension=DIM):
    return faiss.IndexIDMap2(faiss.IndexFlatIP(dimension))


@pytest.fixture(scope="module")
def labelled(outcome_records):
    knowledge = label_outcomes(outcome_records[:100])  # 57 questions: 42 known, 15 not
    return knowledge.questions, knowledge.labels


@pytest.fixture(scope="module")
def vectors(labelled, cached_embedder):
    return cached_embedder.embed(labelled[0])


def test_the_named_conversions_give_cosine_similarity():
    u, v = l2_normalise(np.array([[1.0, 2.0, 0.5], [0.3, -1.0, 2.0]]))
    cos = float(u @ v)
    assert same_score(cos) == cos
    assert cosine_distance(1 - cos) == pytest.approx(cos)
    assert squared_l2(float(np.sum((u - v) ** 2))) == pytest.approx(cos, abs=1e-6)
    assert {"cosine": same_score, "cosine-distance": cosine_distance, "squared-l2": squared_l2} == SIMILARITIES


def test_construction_checks_its_arguments():
    assert IdMapMemory(_store(), DIM).similarity_name == "cosine"
    assert IdMapMemory(_store(), DIM, similarity=squared_l2).similarity_name == "squared-l2"  # named by identity
    assert IdMapMemory(_store(), DIM, similarity=lambda s: s).similarity_name is None
    with pytest.raises(TypeError, match="store must be a faiss IndexIDMap2, got IndexFlatIP"):
        IdMapMemory(faiss.IndexFlatIP(DIM), DIM)
    for bad in [0, -1, True, 3.0]:
        with pytest.raises(ValueError, match="dimension must be a positive int"):
            IdMapMemory(_store(), bad)
    with pytest.raises(ValueError, match=r"similarity must be one of .* got 'euclid'"):
        IdMapMemory(_store(), DIM, similarity="euclid")
    with pytest.raises(TypeError, match="similarity must be a name or a function, got int"):
        IdMapMemory(_store(), DIM, similarity=3)
    with pytest.raises(ValueError, match="similarity must be one of"):
        IdMapMemory.factory(_store, similarity="euclid")  # before any fitting


def test_added_questions_are_found_as_their_own_nearest(labelled, vectors):
    questions, labels = labelled
    memory = IdMapMemory(_store(), DIM)
    memory.add(vectors, labels, questions)
    assert len(memory) == len(questions) == memory.store.ntotal
    assert memory.counts == (labels.count(0), labels.count(1))
    sims, found_labels, texts = memory.search(vectors[:5], k=3)
    assert sims.shape == found_labels.shape == (5, 3)
    np.testing.assert_allclose(sims[:, 0], 1.0, atol=1e-5)
    assert [row[0] for row in texts] == questions[:5]
    assert found_labels[:, 0].tolist() == labels[:5]
    assert (np.diff(sims, axis=1) <= 1e-6).all()  # nearest first
    stored, stored_labels, stored_questions = memory.entries()
    np.testing.assert_allclose(stored, l2_normalise(vectors), atol=1e-6)
    assert stored_labels.tolist() == labels
    assert stored_questions == questions


def test_add_checks_its_parts(vectors, labelled):
    questions, labels = labelled
    memory = IdMapMemory(_store(), DIM)
    with pytest.raises(ValueError, match="expected vectors of shape"):
        memory.add(vectors[:3], labels[:2], questions[:2])
    with pytest.raises(ValueError, match=r"labels of 0 \(known\) or 1 \(unknown\)"):
        memory.add(vectors[:2], [0, 2], questions[:2])
    memory.add(vectors[:0], [], [])
    assert len(memory) == 0 and memory.store.ntotal == 0


def test_a_store_holding_other_entries_is_refused(vectors, labelled):
    questions, labels = labelled
    store = _store()
    store.add_with_ids(l2_normalise(vectors[:1]), np.array([999], dtype=np.int64))  # a document of someone else's
    memory = IdMapMemory(store, DIM)
    with pytest.raises(StoreContentError, match=r"already holds entries this memory did not add \(e\.g\. '999'"):
        memory.add(vectors[1:3], labels[1:3], questions[1:3])
    assert len(memory) == 0
    assert issubclass(StoreContentError, ValueError)


def test_a_store_of_another_width_is_refused(vectors, labelled):
    memory = IdMapMemory(_store(16), DIM)
    with pytest.raises(StoreContentError, match=f"cannot be checked to be empty: searching it with a {DIM}-d vector"):
        memory.add(vectors[:2], labelled[1][:2], labelled[0][:2])


def test_a_refit_over_the_same_store_is_refused(vectors, labelled):
    questions, labels = labelled
    store = _store()
    factory = IdMapMemory.factory(lambda: store)
    assert isinstance(factory, StoreMemoryFactory)
    assert repr(factory) == "IdMapMemory.factory(similarity='cosine')"
    first = factory(DIM)
    first.add(vectors[:4], labels[:4], questions[:4])
    first.add(vectors[4:6], labels[4:6], questions[4:6])  # growing the same memory is fine
    with pytest.raises(StoreContentError, match="already holds the questions this gate's memory added before"):
        factory(DIM).add(vectors[:4], labels[:4], questions[:4])
    assert store.ntotal == 6


def test_an_entry_written_behind_the_memorys_back_is_named(vectors, labelled):
    questions, labels = labelled
    memory = IdMapMemory(_store(), DIM)
    memory.add(vectors[:4], labels[:4], questions[:4])
    memory.store.add_with_ids(l2_normalise(vectors[10:11]), np.array([777], dtype=np.int64))
    with pytest.raises(StoreContentError, match="returned '777', which this memory did not add"):
        memory.search(vectors[10:11], k=1)


def _saved(tmp_path, memory):
    directory = tmp_path / "memory"
    directory.mkdir()
    state = memory.save(directory)
    faiss.write_index(memory.store, str(tmp_path / "store.faiss"))  # the store persists itself
    return directory, state


def test_a_saved_memory_reattaches_to_its_persisted_store(tmp_path, vectors, labelled):
    questions, labels = labelled
    memory = IdMapMemory(_store(), DIM, similarity="cosine")
    memory.add(vectors, labels, questions)
    directory, state = _saved(tmp_path, memory)
    assert state == {"size": len(questions), "dimension": DIM, "store": "IndexIDMap2", "similarity": "cosine"}
    reloaded = faiss.read_index(str(tmp_path / "store.faiss"))
    factory = IdMapMemory.attach(reloaded)
    restored = factory.load(directory, state)
    assert len(restored) == len(memory)
    assert restored.counts == memory.counts
    before, after = memory.search(vectors[:6], k=4), restored.search(vectors[:6], k=4)
    np.testing.assert_allclose(after[0], before[0], atol=1e-6)
    np.testing.assert_array_equal(after[1], before[1])
    assert after[2] == before[2]
    # the restored ids are the gate's: fitting again over that store is refused
    with pytest.raises(StoreContentError, match="questions this gate's memory added before"):
        factory(DIM).add(vectors[:2], labels[:2], questions[:2])


def test_a_store_lacking_saved_questions_is_refused(tmp_path, vectors, labelled):
    questions, labels = labelled
    memory = IdMapMemory(_store(), DIM)
    memory.add(vectors[:5], labels[:5], questions[:5])
    directory, state = _saved(tmp_path, memory)
    partial = _store()
    partial.add_with_ids(l2_normalise(vectors[:3]), np.arange(3, dtype=np.int64))
    with pytest.raises(GateLoadError, match=r"lacks 2 of the 5 questions the memory added \(ids '3', '4'\)"):
        IdMapMemory.attach(partial).load(directory, state)


def test_the_similarity_must_match_the_saved_one(tmp_path, vectors, labelled):
    questions, labels = labelled
    memory = IdMapMemory(_store(), DIM, similarity="cosine")
    memory.add(vectors[:3], labels[:3], questions[:3])
    directory, state = _saved(tmp_path, memory)
    store = faiss.read_index(str(tmp_path / "store.faiss"))
    with pytest.raises(GateLoadError, match=r"'state\.similarity' is 'cosine' but .* converts scores by squared-l2"):
        IdMapMemory.attach(store, similarity="squared-l2").load(directory, state)
    unnamed = IdMapMemory(_store(), DIM, similarity=lambda s: s)
    unnamed.add(vectors[:3], labels[:3], questions[:3])
    other = tmp_path / "unnamed"
    other.mkdir()
    unnamed_state = unnamed.save(other)
    assert unnamed_state["similarity"] is None
    with pytest.raises(GateLoadError, match="saved with a similarity function that has no name"):
        IdMapMemory.attach(unnamed.store).load(other, unnamed_state)


def test_the_knn_gate_fits_saves_and_reloads_over_the_store(tmp_path, labelled, cached_embedder):
    questions, labels = labelled
    store = _store()
    gate = SKRKnnGate(cached_embedder, memory=IdMapMemory.factory(lambda: store), k=5)
    gate.fit(questions[:45], labels[:45])
    assert store.ntotal == 45
    held_out = questions[45:]
    decisions = gate.decide_batch(held_out)
    assert all(d.error is None and not math.isnan(d.score) for d in decisions)
    gate.save(tmp_path / "gate")
    faiss.write_index(store, str(tmp_path / "store.faiss"))
    loaded = SKRKnnGate.load(
        tmp_path / "gate",
        embedder=cached_embedder,
        memory=IdMapMemory.attach(faiss.read_index(str(tmp_path / "store.faiss"))),
    )
    assert [d.score for d in loaded.decide_batch(held_out)] == [d.score for d in decisions]
    with pytest.raises(GateLoadError, match="lacks 45 of the 45 questions"):
        SKRKnnGate.load(tmp_path / "gate", embedder=cached_embedder, memory=IdMapMemory.attach(_store()))
