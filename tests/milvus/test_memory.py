"""The SKR memory and the corpus in a real Milvus server process: decisions as faiss
gives them, one memory shared by gates in two processes, a database restart, the saved
form and its refusals, and the corpus retriever."""

from __future__ import annotations

import json
import logging
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adaptive_gates import (
    FeedbackNotSupportedError,
    GateLoadError,
    SKRKnnGate,
    StoreContentError,
    label_outcomes,
    load_gate,
)
from adaptive_gates.errors import CollectionMismatchError
from adaptive_gates.milvus.memory import MilvusMemory, question_key
from adaptive_gates.milvus.retrieval import MilvusRetriever
from adaptive_gates.retrieval import DenseRetriever
from support.milvus_server import MilvusServer
from support.restart_checks import decisions_compared, run_in_new_process

MINILM_DIMENSION = 384


@pytest.fixture
def collection() -> str:
    """A collection name no other test uses."""
    return f"t_{uuid.uuid4().hex[:16]}"


@pytest.fixture(scope="module")
def labelled(outcome_records) -> tuple[list[str], list[int]]:
    """A few dozen real questions labelled by a capable model's outcomes."""
    knowledge = label_outcomes(outcome_records[:60])
    return knowledge.questions, knowledge.labels


@pytest.fixture(scope="module")
def asked(outcome_records) -> list[str]:
    """Real questions the gates never saw."""
    return [r.question for r in outcome_records[400:416]]


def _gate(embedder, memory=None) -> SKRKnnGate:
    return SKRKnnGate(embedder, k=5, weighting="similarity", memory=memory)


def _decisions(gate: SKRKnnGate, questions: list[str]) -> list[dict]:
    return [d.to_dict() for d in gate.decide_batch(questions)]


def _copies(memory: MilvusMemory, question: str) -> list[int]:
    """The labels of the stored copies of ``question``, in insertion order."""
    _, labels, questions = memory.entries()
    return [int(label) for label, q in zip(labels, questions) if question_key(q) == question_key(question)]


def test_a_gate_over_milvus_decides_as_over_faiss(milvus_uri, embedder, labelled, asked, collection):
    questions, labels = labelled
    over_faiss = _gate(embedder).fit(questions, labels)
    over_milvus = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    expected = _decisions(over_faiss, asked)
    assert decisions_compared(_decisions(over_milvus, asked)) == decisions_compared(expected)
    assert 0 < sum(d["retrieve"] for d in expected) < len(asked)  # both verdicts occur: the check has teeth
    memory = over_milvus.memory_
    assert isinstance(memory, MilvusMemory) and memory.collection == collection
    assert (len(memory), memory.counts) == (len(questions), over_faiss.memory_.counts)
    vectors, stored_labels, stored = memory.entries()
    faiss_vectors, faiss_labels, faiss_questions = over_faiss.memory_.entries()
    assert (stored, stored_labels.tolist()) == (faiss_questions, faiss_labels.tolist())
    np.testing.assert_allclose(vectors, faiss_vectors, atol=1e-6)
    assert over_milvus.prior_counts_ == over_faiss.prior_counts_


def test_attach_memory_moves_a_fitted_gate_with_its_verdicts(milvus_uri, embedder, labelled, asked, collection):
    questions, labels = labelled
    gate = _gate(embedder).fit(questions, labels)
    trained_known = questions[labels.index(0)]
    gate.record_feedback(trained_known, retrieved=False, correct=False)  # a training question judged unknown
    gate.record_feedback(asked[0], retrieved=False, correct=False)
    prior, expected = gate.prior_counts_, _decisions(gate, asked)

    memory = MilvusMemory(milvus_uri, collection, MINILM_DIMENSION)
    assert gate.attach_memory(memory) is gate and gate.memory_ is memory
    assert len(memory) == len(questions) + 2
    assert _copies(memory, trained_known) == [1, 1]  # the training copy carries the verdict
    assert decisions_compared(_decisions(gate, asked)) == decisions_compared(expected)
    assert gate.prior_counts_ == prior

    # A memory that holds questions is taken as it is: a gate of another process attaching later.
    other = _gate(embedder).fit(questions, labels)
    other.attach_memory(MilvusMemory(milvus_uri, collection, MINILM_DIMENSION))
    assert len(memory) == len(questions) + 2
    assert decisions_compared(_decisions(other, asked)) == decisions_compared(expected)
    gate.record_feedback(asked[1], retrieved=False, correct=True)  # feedback now goes into the shared memory
    assert len(other.memory_) == len(questions) + 3 and _copies(other.memory_, asked[1]) == [0]


_SECOND_PROCESS = """
import json, sys
from adaptive_gates import SKRKnnGate
from adaptive_gates.milvus.memory import MilvusMemory
uri, collection, path, question, rewording = sys.argv[1:]
gate = SKRKnnGate.load(path, memory=MilvusMemory.factory(uri, collection))
seen = gate.decide(question).to_dict()
gate.record_feedback(rewording, retrieved=False, correct=True)
print(json.dumps({"seen": seen, "after": gate.decide(question).to_dict()}))
"""


def test_feedback_in_one_process_is_seen_by_another(milvus_uri, embedder, labelled, asked, collection, tmp_path):
    questions, labels = labelled
    gate = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    gate.save(tmp_path / "gate")
    question = asked[2]
    gate.record_feedback(question, retrieved=False, correct=False)  # here: its direct answer was wrong

    # Another process, attached to the same collection, sees that verdict and gives a later one
    # on a wording of the same question (case, punctuation and articles aside).
    rewording = question.upper().rstrip("?")
    second = run_in_new_process(_SECOND_PROCESS, milvus_uri, collection, str(tmp_path / "gate"), question, rewording)
    own = [n for n in second["seen"]["details"]["neighbours"] if n["question"] == question]
    assert [n["label"] for n in own] == ["unknown"] and own[0]["similarity"] == pytest.approx(1.0, abs=1e-5)

    # Back here, the later verdict is on every copy: decisions read it from the database.
    assert _copies(gate.memory_, question) == [0, 0]
    decided = gate.decide(question).to_dict()
    own = [n for n in decided["details"]["neighbours"] if question_key(n["question"]) == question_key(question)]
    assert len(own) == 2 and {n["label"] for n in own} == {"known"}
    assert decisions_compared([decided]) == decisions_compared([second["after"]])


def test_a_database_restart_gives_the_same_decisions(tmp_path, embedder, labelled, asked):
    questions, labels = labelled
    with MilvusServer(tmp_path / "db") as server:
        gate = _gate(embedder, MilvusMemory.factory(server.uri, "skr_memory")).fit(questions, labels)
        gate.record_feedback(asked[3], retrieved=False, correct=False)
        gate.save(tmp_path / "gate")
        before = decisions_compared(_decisions(gate, asked))
        server.restart()
        assert decisions_compared(_decisions(gate, asked)) == before  # the same client, reconnected
        loaded = SKRKnnGate.load(
            tmp_path / "gate", embedder=embedder, memory=MilvusMemory.factory(server.uri, "skr_memory")
        )
        assert decisions_compared(_decisions(loaded, asked)) == before
        assert len(loaded.memory_) == len(questions) + 1


@pytest.mark.parametrize("cut_at", ["set_verdict", "add"])
def test_a_verdict_cut_off_by_an_outage_adds_one_copy_when_sent_again(tmp_path, embedder, labelled, cut_at):
    """The database stops as the verdict relabels the stored copies, or as the lesson's
    copy is written: the verdict is not learnt, and sent again once the database is back
    it leaves one copy of the question under it, not two."""
    from adaptive_gates.errors import BackendUnavailableError

    questions, labels = labelled
    trained = questions[labels.index(0)]
    with MilvusServer(tmp_path / "db") as server:

        class CutOff(MilvusMemory):
            """The real memory; once ``cut`` is set, the database stops as ``cut_at`` is called."""

            cut = False

            def set_verdict(self, question, label):
                self._outage("set_verdict")
                super().set_verdict(question, label)

            def add(self, vectors, labels, questions):
                self._outage("add")
                super().add(vectors, labels, questions)

            def _outage(self, call: str) -> None:
                if self.cut and call == cut_at:
                    self.cut = False
                    server.stop()

        memory = CutOff(server.uri, "memory", MINILM_DIMENSION)
        gate = _gate(embedder).fit(questions, labels).attach_memory(memory)
        memory.cut = True
        with pytest.raises(BackendUnavailableError):
            gate.record_feedback(trained, retrieved=False, correct=False)
        server.start()
        # not learnt: no log entry and no copy of its own (cut at the add, the stored copy
        # may already carry the verdict, which the verdict sent again sets anyway)
        assert len(gate.feedback_) == 0 and len(_copies(gate.memory_, trained)) == 1
        gate.record_feedback(trained, retrieved=False, correct=False)
        assert _copies(gate.memory_, trained) == [1, 1] and len(gate.feedback_) == 1


def test_a_saved_gate_keeps_the_collections_identity_not_its_rows(
    milvus_uri, embedder, labelled, asked, collection, tmp_path
):
    questions, labels = labelled
    factory = MilvusMemory.factory(milvus_uri, collection)
    gate = _gate(embedder, factory).fit(questions, labels)
    gate.record_feedback(asked[4], retrieved=False, correct=False)
    gate.save(tmp_path / "gate")
    state = json.loads((tmp_path / "gate" / "config.json").read_text())["state"]
    assert (state["memory"], state["collection"], state["dimension"], state["size"]) == (
        "milvus",
        collection,
        MINILM_DIMENSION,
        len(questions) + 1,
    )
    assert not list((tmp_path / "gate").glob("*.npy")) and not (tmp_path / "gate" / "questions.json").exists()
    loaded = load_gate(tmp_path / "gate", embedder=embedder, memory=factory)
    assert isinstance(loaded, SKRKnnGate)
    assert decisions_compared(_decisions(loaded, asked)) == decisions_compared(_decisions(gate, asked))
    assert loaded.prior_counts_ == gate.prior_counts_ and len(loaded.feedback_) == 1


def test_a_lesson_taken_back_restores_the_labels_each_copy_was_added_with(
    milvus_uri, embedder, labelled, asked, collection
):
    questions, labels = labelled
    gate = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    trained = questions[labels.index(0)]  # a training question, known
    before = decisions_compared(_decisions(gate, [trained, *asked[:6]]))
    wrong = [gate.record_feedback(trained, retrieved=False, correct=False) for _ in range(2)]
    assert _copies(gate.memory_, trained) == [1, 1, 1]  # the verdict is on the training copy too
    right = gate.record_feedback(asked[0], retrieved=False, correct=True)

    gate.withdraw_feedback(wrong[1])
    assert _copies(gate.memory_, trained) == [1, 1]  # the other wrong verdict still stands
    gate.withdraw_feedback(wrong[0])
    gate.withdraw_feedback(right)
    assert _copies(gate.memory_, trained) == [0] and _copies(gate.memory_, asked[0]) == []
    assert decisions_compared(_decisions(gate, [trained, *asked[:6]])) == before
    assert len(gate.memory_) == len(questions) and len(gate.feedback_) == 0


def test_a_collection_made_before_rows_kept_their_labels_is_read_but_takes_nothing_back(
    milvus_uri, embedder, labelled, asked, collection
):
    from adaptive_gates.milvus.client import MilvusCollection, milvus_client
    from adaptive_gates.milvus.memory import _FIELDS_WITHOUT_GIVEN

    questions, labels = labelled
    MilvusCollection.open(milvus_client(milvus_uri), collection, _FIELDS_WITHOUT_GIVEN, MINILM_DIMENSION)
    gate = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    entry = gate.record_feedback(asked[1], retrieved=False, correct=False)
    assert _copies(gate.memory_, asked[1]) == [1] and gate.decide(asked[1]).error is None
    with pytest.raises(FeedbackNotSupportedError, match="made before each row kept the label it was added with"):
        gate.withdraw_feedback(entry)
    assert _copies(gate.memory_, asked[1]) == [1] and len(gate.feedback_) == 1  # nothing changed


def test_a_fresh_fit_refuses_a_collection_that_holds_rows(milvus_uri, embedder, labelled, collection):
    questions, labels = labelled
    factory = MilvusMemory.factory(milvus_uri, collection)
    _gate(embedder, factory).fit(questions, labels)
    with pytest.raises(StoreContentError, match=f"collection '{collection}' already holds {len(questions)} rows"):
        _gate(embedder, factory).fit(questions, labels)


def test_collections_of_another_width_or_schema_are_refused(milvus_uri, embedder, wiki_paragraphs, collection):
    MilvusMemory(milvus_uri, collection, MINILM_DIMENSION)
    with pytest.raises(CollectionMismatchError, match=f"collection '{collection}' holds 384-d vectors, not 16-d"):
        MilvusMemory(milvus_uri, collection, 16)
    corpus = f"{collection}_corpus"
    MilvusRetriever.from_records(wiki_paragraphs[:3], embedder, milvus_uri, corpus, progress=False)
    with pytest.raises(CollectionMismatchError, match=f"collection '{corpus}' has the fields id .*, text .*, expected"):
        MilvusMemory(milvus_uri, corpus, MINILM_DIMENSION)
    with pytest.raises(ValueError, match="a Milvus collection name is"):
        MilvusMemory.factory(milvus_uri, "not a name")


def test_loading_refuses_a_missing_or_changed_collection(milvus_uri, embedder, labelled, collection, tmp_path):
    from pymilvus import MilvusClient

    questions, labels = labelled
    factory = MilvusMemory.factory(milvus_uri, collection)
    _gate(embedder, factory).fit(questions, labels).save(tmp_path / "gate")
    with pytest.raises(
        GateLoadError, match=f"'state.collection' is '{collection}' but the memory given attaches 'other'"
    ):
        SKRKnnGate.load(tmp_path / "gate", embedder=embedder, memory=MilvusMemory.factory(milvus_uri, "other"))
    client = MilvusClient(uri=milvus_uri)
    client.drop_collection(collection)
    with pytest.raises(GateLoadError, match=f"Milvus collection '{collection}', which the database does not hold"):
        SKRKnnGate.load(tmp_path / "gate", embedder=embedder, memory=factory)
    MilvusMemory(client, collection, 8)  # the name again, over vectors of another encoder
    with pytest.raises(GateLoadError, match=f"collection '{collection}' holds 8-d vectors, not 384-d"):
        SKRKnnGate.load(tmp_path / "gate", embedder=embedder, memory=factory)
    client.drop_collection(collection)
    MilvusMemory(client, collection, MINILM_DIMENSION)  # right width, but emptied
    with pytest.raises(GateLoadError, match=f"'state.size' is {len(questions)} but .* '{collection}' is empty"):
        SKRKnnGate.load(tmp_path / "gate", embedder=embedder, memory=factory)


def test_deciding_from_many_threads_while_feedback_is_added(milvus_uri, embedder, labelled, asked, collection):
    questions, labels = labelled
    gate = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    done = threading.Event()

    def decide() -> list[dict]:
        seen = []
        while not done.is_set():
            seen.extend(_decisions(gate, asked[:4]))
        return seen

    with ThreadPoolExecutor(4) as pool:
        futures = [pool.submit(decide) for _ in range(4)]
        for question in asked[4:10]:
            gate.record_feedback(question, retrieved=False, correct=False)
        done.set()
        seen = [d for f in futures for d in f.result()]
    assert seen and all(d["error"] is None and len(d["details"]["neighbours"]) == 5 for d in seen)
    assert len(gate.memory_) == len(questions) + 6 and gate.memory_.counts[1] == sum(labels) + 6


def test_milvus_retriever_finds_what_dense_finds_and_reuses_its_index(
    milvus_uri, cached_embedder, wiki_paragraphs, wiki_anchor, asked, collection, caplog
):
    # the memo gives Milvus the vectors faiss was given: each passage is embedded once
    embedder = cached_embedder
    records = wiki_paragraphs[:40]
    queries = [wiki_anchor.question, wiki_anchor.keywords, *asked[:4]]
    dense = DenseRetriever.from_records(records, embedder)
    with caplog.at_level(logging.INFO, logger="adaptive_gates.milvus.retrieval"):
        MilvusRetriever.from_records(records[:25], embedder, milvus_uri, collection, batch_size=8, progress=False)
        caplog.clear()
        retriever = MilvusRetriever.from_records(records, embedder, milvus_uri, collection, batch_size=8)
        assert "15 passages embedded" in caplog.text  # an index cut short gets the rest only
        caplog.clear()
        again = MilvusRetriever.from_records(records, embedder, milvus_uri, collection)
        assert "already indexes the 40 passages: reused" in caplog.text and "embedded" not in caplog.text
    assert len(retriever) == len(again) == 40
    expected = dense.search_batch(queries, k=3)
    for found in (retriever.search_batch(queries, k=3), again.search_batch(queries, k=3)):
        assert [[(h.id, h.title, h.text) for h in row] for row in found] == [
            [(h.id, h.title, h.text) for h in row] for row in expected
        ]
        assert [h.score for row in found for h in row] == pytest.approx(
            [h.score for row in expected for h in row], abs=1e-5
        )
    assert retriever.search(wiki_anchor.question, k=1)[0].id == wiki_anchor.id
    assert len(MilvusRetriever(milvus_uri, collection, embedder).search(wiki_anchor.keywords, k=100)) == 40
    with pytest.raises(CollectionMismatchError, match=f"collection '{collection}' holds 40 records not in this corpus"):
        MilvusRetriever.from_records(wiki_paragraphs[40:45], embedder, milvus_uri, collection)
    with pytest.raises(CollectionMismatchError, match="'absent_corpus' does not exist"):
        MilvusRetriever(milvus_uri, "absent_corpus", embedder)


_WITHOUT_PYMILVUS = """
import json, sys
sys.modules["pymilvus"] = None  # an import of it fails as if it were not installed
from adaptive_gates.milvus.memory import MilvusMemory
try:
    MilvusMemory("http://127.0.0.1:9", "memory", 4)
except ImportError as exc:
    print(json.dumps([type(exc).__name__, str(exc)]))
"""


def test_a_missing_pymilvus_names_the_extra():
    name, message = run_in_new_process(_WITHOUT_PYMILVUS)
    assert name == "MissingExtraError" and "pip install 'adaptive-gates[milvus]'" in message


def test_entries_read_every_row_in_insertion_order_past_one_page(milvus_uri, collection):
    from adaptive_gates.bundled.datasets import adarague_outcomes
    from adaptive_gates.memory import FaissMemory
    from adaptive_gates.milvus.client import PAGE_SIZE

    knowledge = label_outcomes(adarague_outcomes())
    questions, labels = knowledge.questions, knowledge.labels
    assert len(questions) > PAGE_SIZE  # the rows come back over more than one request
    # unit vectors of a fixed seed: what is read back is the rows' order, not what the
    # vectors mean (MiniLM over 1,367 questions would take seconds to show the same)
    vectors = np.random.default_rng(0).standard_normal((len(questions), MINILM_DIMENSION)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    memory, reference = MilvusMemory(milvus_uri, collection, MINILM_DIMENSION), FaissMemory(MINILM_DIMENSION)
    for start in range(0, len(questions), 500):  # added in several calls, as a memory grows
        part = slice(start, start + 500)
        memory.add(vectors[part], labels[part], questions[part])
        reference.add(vectors[part], labels[part], questions[part])
    stored_vectors, stored_labels, stored = memory.entries()
    expected_vectors, expected_labels, expected = reference.entries()
    assert (stored, stored_labels.tolist()) == (expected, expected_labels.tolist())
    np.testing.assert_allclose(stored_vectors, expected_vectors, atol=1e-6)
    assert (len(memory), memory.counts) == (len(questions), reference.counts)


def test_one_lesson_withdrawn_from_two_threads_leaves_the_training_rows(milvus_uri, embedder, labelled, collection):
    """The lesson agrees with the training label, so a second removal would delete the
    training row: one thread takes the lesson back, the other is told the log holds none."""
    questions, labels = labelled
    gate = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    trained = questions[labels.index(0)]
    start = threading.Barrier(2)

    def withdraw(entry) -> str:
        start.wait()
        try:
            gate.withdraw_feedback(entry)
        except ValueError as exc:
            return str(exc)
        return "ok"

    for _ in range(12):
        entry = gate.record_feedback(trained, retrieved=False, correct=True)
        with ThreadPoolExecutor(2) as pool:
            outcomes = sorted(f.result() for f in [pool.submit(withdraw, entry) for _ in range(2)])
        assert outcomes[0] == "ok" and "holds no entry" in outcomes[1], outcomes
        assert _copies(gate.memory_, trained) == [0] and len(gate.memory_) == len(questions)
    assert len(gate.feedback_) == 0


def test_a_save_taken_while_lessons_are_withdrawn_is_whole(milvus_uri, embedder, labelled, asked, collection, tmp_path):
    """One thread gives and takes back lessons while another saves: every save counts
    the rows of the lessons its log holds, no more, no fewer."""
    questions, labels = labelled
    gate = _gate(embedder, MilvusMemory.factory(milvus_uri, collection)).fit(questions, labels)
    teaching = threading.Event()

    def teach() -> None:
        for _ in range(30):
            gate.withdraw_feedback(gate.record_feedback(asked[0], retrieved=False, correct=False))
        teaching.set()

    with ThreadPoolExecutor(1) as pool:
        taught = pool.submit(teach)
        saves = []
        while not teaching.is_set() and len(saves) < 40:
            saves.append(gate.save(tmp_path / f"gate{len(saves)}"))
        taught.result()
    torn = []
    for path in saves:
        config = json.loads((path / "config.json").read_text())
        logged = config["state"].get("feedback", {}).get("size", 0)
        if config["state"]["size"] - len(questions) != logged:
            torn.append((path.name, config["state"]["size"] - len(questions), logged))
    assert len(saves) > 5 and not torn
