"""The SKR memory protocol: faiss by default, and any other memory deciding alike.

``ExactMemory`` (numpy) stands in for the vector-store memories of the framework
packages: the same real data must give the same decisions as faiss. The real MiniLM
sits behind the session's memo (``cached_embedder``): the two memories of a comparison
are fitted on the same questions, embedded once.
"""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adaptive_gates import (
    ExactMemory,
    FaissMemory,
    GateLoadError,
    SKRClassifierGate,
    SKRIclGate,
    SKRKnnGate,
    SKRMemory,
    label_outcomes,
    load_gate,
)
from adaptive_gates.memory.memories import l2_normalise
from adaptive_gates.persistence.saved_format import with_checksums
from adaptive_gates.records.selfknowledge import KNOWN, UNKNOWN


def _split(records):
    cut = 2 * len(records) // 3
    return records[:cut], [r.question for r in records[cut:]]


@pytest.mark.parametrize("params", [{"k": 10}, {"k": 5, "vote": "majority"}, {"k": 8, "weighting": "similarity"}])
def test_exact_memory_decides_as_faiss_on_real_data(outcome_records, cached_embedder, params):
    train, probes = _split(outcome_records)
    by_faiss = SKRKnnGate(cached_embedder, **params).fit_outcomes(train).decide_batch(probes)
    by_numpy = SKRKnnGate(cached_embedder, memory=ExactMemory, **params).fit_outcomes(train).decide_batch(probes)
    assert [d.retrieve for d in by_numpy] == [d.retrieve for d in by_faiss]
    assert [d.score for d in by_numpy] == pytest.approx([d.score for d in by_faiss], abs=1e-6)
    for a, b in zip(by_numpy, by_faiss):
        assert [(n["question"], n["label"]) for n in a.details["neighbours"]] == [
            (n["question"], n["label"]) for n in b.details["neighbours"]
        ]
        assert [n["similarity"] for n in a.details["neighbours"]] == pytest.approx(
            [n["similarity"] for n in b.details["neighbours"]], abs=1e-5
        )
    assert 0 < sum(d.retrieve for d in by_faiss) < len(probes)  # both outcomes occur: the check has teeth


def test_classifier_trains_alike_on_either_memory(outcome_records, cached_embedder):
    train, probes = _split(outcome_records)
    faiss_scores = SKRClassifierGate(cached_embedder).fit_outcomes(train).score(probes)
    numpy_scores = SKRClassifierGate(cached_embedder, memory=ExactMemory).fit_outcomes(train).score(probes)
    np.testing.assert_allclose(numpy_scores, faiss_scores, atol=1e-4)


def test_icl_demonstrations_come_through_the_protocol(outcome_records, cached_embedder):
    train, probes = _split(outcome_records)
    batch = probes[:2]
    by_faiss = SKRIclGate(embedder=cached_embedder).fit_outcomes(train).decide_batch(batch)
    by_numpy = SKRIclGate(embedder=cached_embedder, memory=ExactMemory).fit_outcomes(train).decide_batch(batch)
    assert [d.details["demonstrations"] for d in by_numpy] == [d.details["demonstrations"] for d in by_faiss]
    assert [d.score for d in by_numpy] == pytest.approx([d.score for d in by_faiss])


def test_icl_search_widens_until_both_classes_are_found(cached_embedder):
    """The nearest past questions are all known: the unknown demonstration lies beyond
    the first search, which must then look further."""
    countries = [
        "France",
        "Spain",
        "Italy",
        "Germany",
        "Japan",
        "Peru",
        "Chile",
        "Kenya",
        "Egypt",
        "India",
        "Norway",
        "Canada",
        "Mexico",
        "Brazil",
        "Greece",
        "Poland",
        "Cuba",
        "Nepal",
        "Iran",
        "Ghana",
    ]
    known = [f"what is the capital of {c}" for c in countries]
    unknown = "how many goals did the losing side score in the 1958 world cup semi final"
    gate = SKRIclGate(embedder=cached_embedder, n_demos=2, memory=ExactMemory).fit(
        [*known, unknown], [KNOWN] * 20 + [UNKNOWN]
    )
    demos = gate._demonstrations(["what is the capital of Portugal"])[0]
    assert demos[1] == (unknown, UNKNOWN) and demos[0][1] == KNOWN and demos[0][0] in known


@pytest.mark.parametrize("memory", [FaissMemory, ExactMemory])
def test_memories_satisfy_the_protocol_and_count(memory, cached_embedder):
    store = memory(cached_embedder.dimension)
    assert isinstance(store, SKRMemory)
    questions = ["who wrote hamlet", "boiling point of water", "first man on the moon"]
    store.add(cached_embedder.embed(questions), [KNOWN, UNKNOWN, UNKNOWN], questions)
    assert len(store) == 3 and store.counts == (1, 2)
    sims, labels, texts = store.search(cached_embedder.embed(["author of hamlet", "moon landing"]), 10)
    assert sims.shape == labels.shape == (2, 3)  # k is capped at the size
    assert texts[0][0] == "who wrote hamlet" and texts[1][0] == "first man on the moon"
    assert np.all(np.diff(sims, axis=1) <= 1e-7)  # nearest first
    vectors, stored_labels, stored_questions = store.entries()
    assert stored_questions == questions and stored_labels.tolist() == [KNOWN, UNKNOWN, UNKNOWN]
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    with pytest.raises(ValueError, match="shape"):
        store.add(cached_embedder.embed(questions[:1]), [KNOWN], questions)
    with pytest.raises(ValueError, match=r"labels of 0 \(known\) or 1"):
        store.add(cached_embedder.embed(questions[:1]), [2], questions[:1])
    assert len(store) == 3 and store.counts == (1, 2)


def test_a_factory_that_makes_no_memory_is_refused(cached_embedder):
    with pytest.raises(ValueError, match="memory must"):
        SKRKnnGate(cached_embedder, memory="exact")
    with pytest.raises(TypeError, match="no SKRMemory"):
        SKRKnnGate(cached_embedder, memory=lambda dimension: {}).fit(["a question", "another one"], [0, 1])


def test_exact_memory_round_trips_and_is_not_read_as_faiss(outcome_records, cached_embedder, tmp_path):
    train, probes = _split(outcome_records)
    gate = SKRKnnGate(cached_embedder, memory=ExactMemory).fit_outcomes(train)
    gate.save(tmp_path / "g")
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [
        "config.json",
        "labels.npy",
        "questions.json",
        "vectors.npy",
    ]
    loaded = SKRKnnGate.load(tmp_path / "g", embedder=cached_embedder, memory=ExactMemory)
    assert [d.details for d in loaded.decide_batch(probes[:20])] == [d.details for d in gate.decide_batch(probes[:20])]
    with pytest.raises(GateLoadError, match=r"'state\.memory' is 'exact'.*'faiss'"):
        load_gate(tmp_path / "g", embedder=cached_embedder)


def test_a_faiss_save_without_the_memory_field_still_loads(cached_embedder, tmp_path):
    """Gates saved before the memory kind was recorded hold a faiss memory."""
    questions = ["who wrote hamlet", "boiling point of water", "first man on the moon", "capital of peru"]
    gate = SKRKnnGate(cached_embedder, k=2).fit(questions, [KNOWN, UNKNOWN, UNKNOWN, KNOWN])
    gate.save(tmp_path / "g")
    config_path = tmp_path / "g" / "config.json"
    config = json.loads(config_path.read_text())
    assert config["state"].pop("memory") == "faiss"
    config_path.write_text(json.dumps(with_checksums(config)))
    loaded = SKRKnnGate.load(tmp_path / "g", embedder=cached_embedder)
    assert loaded.decide("author of hamlet").details == gate.decide("author of hamlet").details


class UnsavedMemory(ExactMemory):
    """A memory that lives in a service and cannot write itself to a directory."""

    kind = "service"

    def save(self, directory):
        raise NotImplementedError("the service keeps the vectors")


def test_a_memory_that_cannot_save_says_so_on_gate_save(cached_embedder, tmp_path):
    gate = SKRKnnGate(cached_embedder, memory=UnsavedMemory).fit(
        ["who wrote hamlet", "capital of peru"], [KNOWN, UNKNOWN]
    )
    with pytest.raises(
        NotImplementedError, match=r"SKRKnnGate cannot be saved: its memory UnsavedMemory.*service keeps"
    ):
        gate.save(tmp_path / "g")
    assert not (tmp_path / "g").exists() and not list(tmp_path.iterdir())  # nothing half-written


def test_exact_memory_adds_while_others_search(outcome_records, cached_embedder):
    knowledge = label_outcomes(outcome_records)
    vectors = cached_embedder.embed(knowledge.questions)
    pairs = set(zip(knowledge.questions, knowledge.labels))
    memory = ExactMemory(cached_embedder.dimension)
    memory.add(vectors[:10], knowledge.labels[:10], knowledge.questions[:10])
    done = threading.Event()

    def writer():
        for start in range(10, len(vectors), 7):
            end = min(start + 7, len(vectors))
            memory.add(vectors[start:end], knowledge.labels[start:end], knowledge.questions[start:end])
        done.set()

    def reader(i):
        checked = 0
        while not done.is_set() or checked < 20:
            sims, labels, texts = memory.search(vectors[i : i + 1], 5)
            assert set(zip(texts[0], labels[0].tolist())) <= pairs  # every hit is a stored pair
            assert np.all(np.diff(sims[0]) <= 1e-6)
            assert texts[0][0] == knowledge.questions[i] or sims[0][0] >= 0.999  # itself first
            checked += 1
        return checked

    with ThreadPoolExecutor(max_workers=4) as pool:
        readers = [pool.submit(reader, i) for i in range(3)]
        pool.submit(writer).result()
        assert all(r.result() >= 20 for r in readers)
    labels = np.asarray(knowledge.labels)
    assert len(memory) == len(knowledge.questions)
    assert memory.counts == (int((labels == KNOWN).sum()), int((labels == UNKNOWN).sum()))


def test_the_named_similarities_turn_store_scores_into_cosine(cached_embedder):
    """What a store-backed memory saves by name: each conversion gives back the cosine
    similarity of real unit embeddings from the score such a store returns."""
    from adaptive_gates.memory.store_backed import SIMILARITIES

    a, b = l2_normalise(cached_embedder.embed(["Who wrote Hamlet?", "Who wrote Macbeth?"]))
    cosine = float(a @ b)
    scores = {"cosine": cosine, "cosine-distance": 1 - cosine, "squared-l2": float(((a - b) ** 2).sum())}
    assert scores.keys() == SIMILARITIES.keys()
    for name, score in scores.items():
        assert SIMILARITIES[name](score) == pytest.approx(cosine, abs=1e-6), name
    assert 0.3 < cosine < 0.99  # related, not the same question
