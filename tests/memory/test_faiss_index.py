"""FaissMemory at scale: exact while small, an approximate faiss index (HNSW, IVF) past a
size, agreeing with the exact search on real questions, growing online, saved and
checked like the rest of a gate. MiniLM sits behind the session's memo
(``cached_embedder``): the gates compared fit on the same real questions, embedded once."""

import json
import threading
from concurrent.futures import ThreadPoolExecutor

import faiss
import numpy as np
import pytest

from adaptive_gates import ExactMemory, FaissMemory, GateLoadError, SKRKnnGate, label_outcomes, load_gate
from adaptive_gates.memory.memories import l2_normalise
from adaptive_gates.persistence.saved_format import with_checksums

N_MEMORY = 3000
N_QUERIES = 300


@pytest.fixture(scope="module")
def real_vectors(unlabelled_questions, cached_embedder):
    """A few thousand real questions and held-out queries, embedded by MiniLM once."""
    texts = unlabelled_questions[: N_MEMORY + N_QUERIES]
    vectors = cached_embedder.embed(texts)
    return texts[:N_MEMORY], vectors[:N_MEMORY], texts[N_MEMORY:], vectors[N_MEMORY:]


def _labels(n):
    return (np.arange(n) % 4 == 0).astype(int).tolist()


def _filled(memory, questions, vectors, chunk=500):
    for s in range(0, len(questions), chunk):
        memory.add(vectors[s : s + chunk], _labels(len(questions))[s : s + chunk], questions[s : s + chunk])
    return memory


def _recall_at_10(memory, exact, queries):
    _, _, found = memory.search(queries, 10)
    _, _, truth = exact.search(queries, 10)
    return np.mean([len(set(f) & set(t)) / 10 for f, t in zip(found, truth)])


def _split(records):
    cut = 2 * len(records) // 3
    return records[:cut], [r.question for r in records[cut:]]


@pytest.mark.parametrize("index", ["hnsw", "ivf", "auto"])
def test_approximate_recall_at_10_on_real_questions(real_vectors, index):
    questions, vectors, _, queries = real_vectors
    exact = _filled(ExactMemory(vectors.shape[1]), questions, vectors)
    # nprobe 16 of IVF's 25 lists: the default would probe all of them
    memory = _filled(FaissMemory(vectors.shape[1], index=index, switch_at=1000, nprobe=16), questions, vectors)
    assert memory.structure == ("hnsw" if index == "auto" else index)
    assert _recall_at_10(memory, exact, queries) >= 0.95


def test_weak_settings_do_lose_neighbours(real_vectors):
    """The recall measure has teeth: an IVF index probing one list of many misses some."""
    questions, vectors, _, queries = real_vectors
    exact = _filled(ExactMemory(vectors.shape[1]), questions, vectors)
    weak = _filled(FaissMemory(vectors.shape[1], index="ivf", switch_at=1000, nprobe=1), questions, vectors)
    assert _recall_at_10(weak, exact, queries) < 0.9


def test_auto_switches_past_the_threshold_and_keeps_adding(real_vectors):
    questions, vectors, _, _ = real_vectors
    memory = FaissMemory(vectors.shape[1], switch_at=1200)
    seen = []
    for s in range(0, N_MEMORY, 400):
        memory.add(vectors[s : s + 400], _labels(N_MEMORY)[s : s + 400], questions[s : s + 400])
        seen.append((len(memory), memory.structure))
    assert seen[:3] == [(400, "exact"), (800, "exact"), (1200, "hnsw")]
    assert all(structure == "hnsw" for _, structure in seen[2:]) and seen[-1][0] == N_MEMORY
    stored, labels, texts = memory.entries()
    assert texts == questions and labels.tolist() == _labels(N_MEMORY)
    np.testing.assert_allclose(stored, l2_normalise(vectors), atol=1e-6)
    # Questions added after the switch are found: each is its own nearest neighbour.
    late = slice(2000, 2100)
    sims, _, found = memory.search(vectors[late], 1)
    assert [row[0] for row in found] == questions[late] and np.all(sims[:, 0] > 0.999)
    assert memory.counts == (N_MEMORY - sum(_labels(N_MEMORY)), sum(_labels(N_MEMORY)))


def test_exact_setting_never_switches(real_vectors):
    questions, vectors, _, _ = real_vectors
    memory = _filled(FaissMemory(vectors.shape[1], index="exact", switch_at=10), questions, vectors)
    assert memory.structure == "exact"


def test_ivf_is_retrained_once_grown_by_the_factor(real_vectors):
    questions, vectors, _, queries = real_vectors
    memory = FaissMemory(vectors.shape[1], index="ivf", switch_at=600, retrain_growth=2.0, nprobe=32)
    lists = []
    for s in range(0, N_MEMORY, 300):
        memory.add(vectors[s : s + 300], _labels(N_MEMORY)[s : s + 300], questions[s : s + 300])
        lists.append((len(memory), memory.structure, memory._index.nlist if memory.structure == "ivf" else 0))
    # trained at 600 rows (15 lists), again at 1200 (30) and at 2400 (61)
    assert [n for _, _, n in lists] == [0, 15, 15, 30, 30, 30, 30, 61, 61, 61]
    exact = _filled(ExactMemory(vectors.shape[1]), questions, vectors)
    assert _recall_at_10(memory, exact, queries) >= 0.95
    assert memory.entries()[2] == questions


@pytest.mark.parametrize("settings", [dict(index="hnsw"), dict(index="ivf", nprobe=4)], ids=["hnsw", "ivf"])
def test_gate_decides_as_exact_on_held_out_real_questions(outcome_records, cached_embedder, settings):
    """Approximate from the first row (the IVF index probing half of its lists, so it
    does not scan everything): the same decisions on at least 95% of held-out questions."""
    train, probes = _split(outcome_records)
    exact = SKRKnnGate(cached_embedder, memory=ExactMemory).fit_outcomes(train)
    configured = FaissMemory.configured(switch_at=0, **settings)
    approximate = SKRKnnGate(cached_embedder, memory=configured).fit_outcomes(train)
    assert approximate.memory_.structure == settings["index"]
    by_exact, by_approximate = exact.decide_batch(probes), approximate.decide_batch(probes)
    same = np.mean([a.retrieve == b.retrieve for a, b in zip(by_exact, by_approximate)])
    assert same >= 0.95
    assert 0 < sum(d.retrieve for d in by_exact) < len(probes)  # both outcomes occur


def test_below_the_switch_auto_decides_exactly_as_exact(outcome_records, cached_embedder):
    train, probes = _split(outcome_records)
    by_default = SKRKnnGate(cached_embedder).fit_outcomes(train)
    assert by_default.memory_.structure == "exact" and by_default.memory_.settings.index == "auto"
    by_numpy = SKRKnnGate(cached_embedder, memory=ExactMemory).fit_outcomes(train)
    a, b = by_default.decide_batch(probes), by_numpy.decide_batch(probes)
    assert [d.retrieve for d in a] == [d.retrieve for d in b]
    assert [[n["question"] for n in d.details["neighbours"]] for d in a] == [
        [n["question"] for n in d.details["neighbours"]] for d in b
    ]


def test_adds_crossing_the_switch_while_others_search(real_vectors):
    """Two writers cross the switch while readers search: the rebuild runs outside the
    search lock, and rows added during it must be carried into the new index."""
    questions, vectors, _, _ = real_vectors
    memory = FaissMemory(vectors.shape[1], switch_at=1000)
    memory.add(vectors[:10], _labels(10), questions[:10])
    pairs = set(zip(questions, _labels(N_MEMORY)))
    done = threading.Event()

    def writer(offset):
        for s in range(10 + offset, N_MEMORY, 100):
            memory.add(vectors[s : s + 50], _labels(N_MEMORY)[s : s + 50], questions[s : s + 50])

    def reader(i):
        checked = 0
        while not done.is_set() or checked < 20:
            sims, labels, texts = memory.search(vectors[i : i + 1], 5)
            assert set(zip(texts[0], labels[0].tolist())) <= pairs and len(texts[0]) == 5
            assert np.all(np.diff(sims[0]) <= 1e-6)
            checked += 1
        return checked

    with ThreadPoolExecutor(max_workers=5) as pool:
        readers = [pool.submit(reader, i) for i in range(3)]
        writers = [pool.submit(writer, offset) for offset in (0, 50)]
        for w in writers:
            w.result()
        done.set()
        assert all(r.result() >= 20 for r in readers)
    assert memory.structure == "hnsw" and len(memory) == N_MEMORY
    stored, labels, texts = memory.entries()
    assert sorted(texts) == sorted(questions)
    order = {q: i for i, q in enumerate(questions)}
    # every row of the index holds the vector of the question at its position
    np.testing.assert_allclose(stored, l2_normalise(vectors)[[order[t] for t in texts]], atol=1e-6)
    assert labels.tolist() == [_labels(N_MEMORY)[order[t]] for t in texts]


@pytest.mark.parametrize("index", ["hnsw", "ivf"])
def test_approximate_gate_round_trips_and_keeps_growing(outcome_records, cached_embedder, tmp_path, index):
    knowledge = label_outcomes(outcome_records)
    cut = 2 * len(knowledge.questions) // 3
    # switched well before the fit's size, whichever outcome records the suite has
    memory = FaissMemory.configured(index=index, switch_at=cut // 2, ef_search=40, nprobe=3)
    gate = SKRKnnGate(cached_embedder, memory=memory).fit(knowledge.questions[:cut], knowledge.labels[:cut])
    assert gate.memory_.structure == index
    gate.save(tmp_path / "g")
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == [
        "config.json",
        "labels.npy",
        "memory.faiss",
        "questions.json",
    ]
    probes = [r.question for r in outcome_records[-40:]]
    for loaded in (
        SKRKnnGate.load(tmp_path / "g", embedder=cached_embedder, memory=memory),
        load_gate(tmp_path / "g", embedder=cached_embedder),
    ):
        assert loaded.memory_.structure == index and loaded.memory_.settings == gate.memory_.settings
        assert [d.details for d in loaded.decide_batch(probes)] == [d.details for d in gate.decide_batch(probes)]
    # grows after loading as before saving
    rest = knowledge.questions[cut:], knowledge.labels[cut:]
    gate.add(*rest)
    loaded.add(*rest)
    assert [d.details for d in loaded.decide_batch(probes)] == [d.details for d in gate.decide_batch(probes)]


@pytest.fixture
def saved_hnsw_gate(outcome_records, cached_embedder, tmp_path):
    switch_at = len(label_outcomes(outcome_records).questions) // 2
    gate = SKRKnnGate(cached_embedder, memory=FaissMemory.configured(switch_at=switch_at)).fit_outcomes(outcome_records)
    assert gate.memory_.structure == "hnsw"
    gate.save(tmp_path / "g")
    return gate, tmp_path / "g"


def test_tampered_index_file_is_refused(saved_hnsw_gate, cached_embedder):
    _, path = saved_hnsw_gate
    raw = bytearray((path / "memory.faiss").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (path / "memory.faiss").write_bytes(bytes(raw))
    with pytest.raises(GateLoadError, match=r"'memory\.faiss' does not match its checksum"):
        load_gate(path, embedder=cached_embedder)


def _rewrite(path, edit_state, index=None):
    """Re-save the directory as a forger would: new file and config checksums."""
    import hashlib

    if index is not None:
        faiss.write_index(index, str(path / "memory.faiss"))
    config = json.loads((path / "config.json").read_text())
    edit_state(config["state"])
    config["files"]["memory.faiss"] = hashlib.sha256((path / "memory.faiss").read_bytes()).hexdigest()
    (path / "config.json").write_text(json.dumps(with_checksums(config)))


def test_an_index_that_does_not_fit_its_state_is_refused(saved_hnsw_gate, cached_embedder):
    gate, path = saved_hnsw_gate
    flat = faiss.IndexFlatL2(gate.memory_.dimension)  # Euclidean: not cosine
    flat.add(gate.memory_.entries()[0])
    _rewrite(path, lambda state: None, flat)
    with pytest.raises(GateLoadError, match=r"does not fit the memory's state.*inner product"):
        load_gate(path, embedder=cached_embedder)


def test_a_state_naming_another_index_is_refused(saved_hnsw_gate, cached_embedder):
    _, path = saved_hnsw_gate

    def to_ivf(state):
        state["index"]["settings"]["index"] = "ivf"

    _rewrite(path, to_ivf)
    with pytest.raises(GateLoadError, match="the index is 'hnsw' but the settings use 'ivf'"):
        load_gate(path, embedder=cached_embedder)


def test_invalid_saved_settings_are_refused(saved_hnsw_gate, cached_embedder):
    _, path = saved_hnsw_gate

    def bad(state):
        state["index"]["settings"]["ef_search"] = 0

    _rewrite(path, bad)
    with pytest.raises(GateLoadError, match=r"'state\.index\.settings' is invalid.*ef_search"):
        load_gate(path, embedder=cached_embedder)


def test_an_exact_memory_saved_before_index_settings_still_loads(outcome_records, cached_embedder, tmp_path):
    """Saves before the index settings were recorded hold an exact index."""
    gate = SKRKnnGate(cached_embedder).fit_outcomes(outcome_records)
    gate.save(tmp_path / "g")
    _rewrite(tmp_path / "g", lambda state: state.pop("index"))
    loaded = load_gate(tmp_path / "g", embedder=cached_embedder)
    assert loaded.memory_.structure == "exact" and loaded.memory_.settings.index == "auto"
    probes = [r.question for r in outcome_records[:20]]
    assert [d.details for d in loaded.decide_batch(probes)] == [d.details for d in gate.decide_batch(probes)]


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(index="annoy"), "index must be one of"),
        (dict(switch_at=-1), "switch_at must be an int >= 0"),
        (dict(ef_search=0), "ef_search must be an int >= 1"),
        (dict(retrain_growth=1.0), "retrain_growth must be a number > 1"),
        (dict(efsearch=10), "efsearch"),
    ],
)
def test_bad_settings_are_refused_before_fitting(settings, message):
    with pytest.raises((ValueError, TypeError), match=message):
        FaissMemory.configured(**settings)
