"""The core's shadow learner (``gates.shadow_learner``), the part of shadow learning
every door shares, on real parts: a draft-check gate fitted on the bundled HotpotQA
outcomes of Llama-3.1-8B, BM25 over those questions' own paragraphs and the real
MiniLM; a decision is built from a record's recorded draft, and the "door's answer"
over the passages is the record's recorded answer with one retrieval."""

from __future__ import annotations

import dataclasses
import logging
import threading

import pytest

from adaptive_gates import DraftCheckGate, Gate, SKRKnnGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.extend import ShadowLearner, door_learner
from adaptive_gates.records.data import CorpusRecord, OutcomeRecord
from adaptive_gates.records.decision import GateDecision
from adaptive_gates.retrieval import BM25Retriever

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records fitted on, and records answered after the fit.
FIT, ANSWERED = 120, 6


@pytest.fixture(scope="module")
def records() -> list[OutcomeRecord]:
    return adarague_outcomes("hotpotqa")[: FIT + ANSWERED]


@pytest.fixture(scope="module")
def retriever(records) -> BM25Retriever:
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return BM25Retriever.from_records([CorpusRecord(f"h{i}", t, x) for i, (t, x) in enumerate(unique)])


@pytest.fixture(scope="module")
def fitted(records, retriever, cached_embedder) -> DraftCheckGate:
    return DraftCheckGate(retriever=retriever, embedder=cached_embedder, embedding_dims=8).fit_outcomes(records[:FIT])


@pytest.fixture
def gate(fitted, retriever, cached_embedder, tmp_path) -> DraftCheckGate:
    """A fresh copy of the fitted gate (through a save), so that each test learns alone."""
    fitted.save(tmp_path / "fitted")
    return Gate.load(tmp_path / "fitted", retriever=retriever, embedder=cached_embedder)


@pytest.fixture(scope="module")
def knn_gate(cached_embedder) -> SKRKnnGate:
    """A gate that does not learn from answered decisions."""
    questions = ["Who wrote Hamlet?", "What was the population of Tuvalu in the 2021 census?"]
    return SKRKnnGate(cached_embedder, k=1).fit(questions, [0, 1])


def decided(gate: DraftCheckGate, record: OutcomeRecord, retrieve: bool) -> GateDecision:
    """The decision the gate would take on ``record`` with its recorded draft, routed as told."""
    return GateDecision(
        retrieve,
        0.5,
        gate.threshold_,
        gate.name,
        question=record.question,
        draft_answer=None if retrieve else record.pred_no_retrieval,
        answer_without_retrieval=record.pred_no_retrieval,
        passages=tuple(gate.retriever.search(record.question, gate.k)),
    )


def test_what_an_answer_teaches(gate, knn_gate, records) -> None:
    record = records[FIT]
    retrieved, direct = decided(gate, record, True), decided(gate, record, False)
    assert ShadowLearner(gate, rate=0.0).plan(retrieved, retrieved=True) == "retrieved"
    assert ShadowLearner(gate, rate=0.0).plan(direct, retrieved=False) is None
    learner = ShadowLearner(gate, rate=1.0)
    assert learner.plan(direct, retrieved=False) == "shadow" and learner.counts["shadows_asked"] == 1
    # a retrieving decision the door answered without its passages (forced, graded away) is a direct one
    assert learner.plan(retrieved, retrieved=False) == "shadow"
    for nothing in (
        dataclasses.replace(direct, passages=None),
        dataclasses.replace(direct, answer_without_retrieval=None),
        dataclasses.replace(direct, error="TimeoutError: the LLM did not answer"),
        dataclasses.replace(direct, gate="another-gate"),
    ):
        assert learner.plan(nothing, retrieved=False) is None
    at_random = ShadowLearner(gate, rate=0.3, seed=7)
    drawn = sum(at_random.plan(direct, retrieved=False) == "shadow" for _ in range(400))
    assert 80 < drawn < 160  # about 120 of 400
    assert not ShadowLearner(knn_gate, rate=1.0).active and ShadowLearner(knn_gate).plan(retrieved, True) is None


def test_pairs_are_recorded_in_the_background_and_the_gate_refits_every_n(gate, records) -> None:
    learner = ShadowLearner(gate, rate=0.5, refit_every=3, seed=0)
    asked: list[str] = []

    def ask(record: OutcomeRecord):
        def answer() -> str:
            asked.append(threading.current_thread().name)
            return record.pred_one_retrieval + "\nA second line the pair does not read"

        return answer

    answered = records[FIT : FIT + ANSWERED]
    for i, record in enumerate(answered):
        retrieve = i % 2 == 0
        text = record.pred_one_retrieval if retrieve else record.pred_no_retrieval
        learner.after_answer(decided(gate, record, retrieve), retrieve, text, ask(record))
    assert learner.drain(120.0)
    entries = gate.shadow_.entries()
    shadows = [e for e in entries if e.source == "shadow"]
    assert [e.question for e in entries if e.source == "retrieved"] == [r.question for r in answered[::2]]
    assert len(shadows) == learner.counts["shadows_asked"] == len(asked) and all(e.probability == 0.5 for e in shadows)
    assert all(name.startswith("shadow-learning") for name in asked)  # never on the caller's thread
    assert all("\n" not in e.answer for e in shadows)  # the answer's first line, as the server reads it
    assert learner.counts["refits"] == gate.shadow_.refits == len(entries) // 3
    assert learner.stats()["pairs_recorded"] == len(entries)


def test_a_failing_answer_or_pair_is_logged_and_counted_never_raised(gate, records, caplog) -> None:
    learner = ShadowLearner(gate, rate=1.0, refit_every=1)

    def failing() -> str:
        raise TimeoutError("the upstream did not answer")

    record = records[FIT]
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.gates.shadow.learner"):
        learner.after_answer(decided(gate, record, False), False, record.pred_no_retrieval, failing)
        assert learner.drain(60.0)
        # a decision the gate cannot read (no question) is counted, not raised
        broken = dataclasses.replace(decided(gate, record, True), question=None)
        assert learner.record(broken, "an answer", "retrieved") == (None, False)
    assert learner.counts["shadow_failures"] == 2 and len(gate.shadow_) == 0 and gate.shadow_.refits == 0
    assert any("TimeoutError: the upstream did not answer" in r.getMessage() for r in caplog.records)


def test_the_door_options(gate, knn_gate) -> None:
    assert door_learner(gate, None) is None  # no option: nothing is recorded
    made = door_learner(gate, 0.2, 10)
    assert made is not None and (made.rate, made.refit_every, made.active) == (0.2, 10, True)
    given = ShadowLearner(gate)
    assert door_learner(gate, None, learner=given) is given
    with pytest.raises(ValueError, match="not both"):
        door_learner(gate, 0.2, learner=given)
    with pytest.raises(ValueError, match="draft-check"):
        door_learner(knn_gate, 0.2)
    for rate, every in ((1.5, 10), (-0.1, 10), (0.2, 0)):
        with pytest.raises(ValueError, match="rate must be in"):
            ShadowLearner(gate, rate=rate, refit_every=every)
