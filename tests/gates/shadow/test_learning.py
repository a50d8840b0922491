"""A draft-check gate learning from served decisions (``gates.shadow``,
``gates.shadow_learning``) on real parts: the bundled HotpotQA outcomes of
Llama-3.1-8B (the draft is the recorded answer without retrieval, the answer over the
passages the recorded answer with one retrieval), BM25 over those questions' own
Wikipedia paragraphs, the real MiniLM, and the package's shipped gate. A decision is
built as the gate would have taken it from those recorded answers: the question, the
draft and the passages the gate's own retriever returns."""

from __future__ import annotations

import dataclasses
import json

import numpy as np
import pytest

from adaptive_gates import DraftCheckGate, Gate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.bundled.shipped import pretrained
from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates.base.feedback import FeedbackNotSupportedError
from adaptive_gates.gates.combiner.features import refit_feature_combiner
from adaptive_gates.gates.shadow.observations import MIN_ROWS, Observation, pair, teaching, verdict
from adaptive_gates.records.data import CorpusRecord, OutcomeRecord
from adaptive_gates.records.decision import GateDecision
from adaptive_gates.retrieval import BM25Retriever

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records fitted on, and records served after the fit.
FIT, SERVED = 200, 60


@pytest.fixture(scope="module")
def records() -> list[OutcomeRecord]:
    return adarague_outcomes("hotpotqa")[: FIT + SERVED]


@pytest.fixture(scope="module")
def retriever(records) -> BM25Retriever:
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return BM25Retriever.from_records([CorpusRecord(f"h{i}", t, x) for i, (t, x) in enumerate(unique)])


@pytest.fixture(scope="module")
def fitted(records, retriever, cached_embedder) -> DraftCheckGate:
    gate = DraftCheckGate(retriever=retriever, embedder=cached_embedder, embedding_dims=8)
    return gate.fit_outcomes(records[:FIT])


@pytest.fixture
def gate(fitted, retriever, cached_embedder, tmp_path) -> DraftCheckGate:
    """A fresh copy of the fitted gate (through a save), so that each test learns alone."""
    fitted.save(tmp_path / "fitted")
    return Gate.load(tmp_path / "fitted", retriever=retriever, embedder=cached_embedder)


def served(gate: DraftCheckGate, record: OutcomeRecord) -> GateDecision:
    """The decision the gate takes on ``record`` with its recorded draft."""
    score = float(gate.score_records([record])[0])
    retrieve = score > gate.threshold_
    return GateDecision(
        retrieve,
        score,
        gate.threshold_,
        gate.name,
        question=record.question,
        draft_answer=None if retrieve else record.pred_no_retrieval,
        answer_without_retrieval=record.pred_no_retrieval,
        passages=tuple(gate.retriever.search(record.question, gate.k)),
    )


def observe(gate: DraftCheckGate, records: list[OutcomeRecord], rate: float) -> list[Observation]:
    """Each record's pair: a retrieved one always, a direct one as a shadow (every one
    of them here, logged with the chance ``rate`` the server would have drawn it)."""
    out = []
    for record in records:
        decision = served(gate, record)
        source = "retrieved" if decision.retrieve else "shadow"
        chance = 1.0 if decision.retrieve else rate
        out.append(gate.record_pair(decision, record.pred_one_retrieval, source=source, probability=chance))
    return out


def test_a_pair_is_graded_by_agreement_and_weighted_by_the_chance_it_was_seen() -> None:
    same = pair("q", "Paris", "paris.", "retrieved", 1.0)
    other = pair("q", "Lyon", "Paris", "shadow", 0.2)
    empty = pair("q", "Lyon", "", "shadow", 0.2)
    assert (same.helps, same.weight) == (0.0, 1.0)
    assert other.helps == 1.0 and other.weight == pytest.approx(5.0)
    assert empty.helps == 0.0  # an empty answer over the passages corrects nothing
    with pytest.raises(ValueError, match=r"\(0, 1\]"):
        pair("q", "a", "b", "shadow", 0.0)
    with pytest.raises(ValueError, match="'retrieved' or 'shadow'"):
        pair("q", "a", "b", "verdict", 1.0)


def test_a_labelled_verdict_outranks_the_pairs_of_its_question() -> None:
    entries = [
        pair("Who wrote Dracula?", "Stoker", "Bram Stoker", "retrieved", 1.0),
        pair("Where is Lyon?", "France", "Italy", "shadow", 0.5),
        verdict("who wrote dracula", "Stoker", retrieved=False, correct=True, wrong_with_retrieval=False),
        verdict("Where is Lyon?", "France", retrieved=True, correct=True, wrong_with_retrieval=False),
        verdict("Who wrote Dracula?", "Stoker", retrieved=False, correct=False, wrong_with_retrieval=False),
    ]
    # the second Dracula verdict replaces the first and its pair; a verdict on an
    # answer made with retrieval gives no label, so Lyon's pair still teaches
    assert teaching(entries).tolist() == [False, True, False, False, True]
    assert entries[4].helps == 1.0 and entries[3].helps is None


def test_the_gate_refits_every_n_observations_on_the_helps_target(gate, records) -> None:
    held = records[FIT:]
    before = gate.score_records(held)
    fitted_threshold = gate.threshold_
    assert gate.fit_rows_ is not None and len(gate.fit_rows_) == FIT
    entries = []
    refits = []
    for record in held[:40]:
        entries += observe(gate, [record], rate=0.2)
        refits.append(gate.learn(every=20))
    assert [i for i, done in enumerate(refits) if done] == [19, 39]
    assert gate.shadow_.refits == 2 and gate.shadow_.learned == 40 == len(gate.shadow_)
    assert {e.source for e in entries} == {"retrieved", "shadow"}
    assert gate.combiner_.target == "helps" and set(gate.combiner_.boosted) == {"helps"}
    after = gate.score_records(held)
    assert not np.allclose(before, after)
    assert gate.threshold_ != fitted_threshold
    # what it learnt is the weighted refit of the fit's rows and the pairs
    rows = gate.fit_rows_
    entries_now, features, embeddings = gate.shadow_.rows()
    weights = np.r_[np.ones(FIT), [e.weight for e in entries_now]]
    assert sorted(set(weights[FIT:].tolist())) == [1.0, 5.0]
    direct = refit_feature_combiner(
        gate._fitted_combiner[0],
        np.vstack([rows.features, features]),
        {"helps": np.r_[rows.helps, [e.helps for e in entries_now]]},
        embeddings=np.vstack([rows.embeddings, embeddings]),
        rows=FIT,
        C=gate.C,
        sample_weight=weights,
        target="helps",
    )
    np.testing.assert_allclose(direct.score(features, embeddings), gate.combiner_.score(features, embeddings))


def test_learning_is_saved_with_the_gate_and_withdrawn_like_a_lesson(
    gate, records, retriever, cached_embedder, tmp_path
):
    held = records[FIT:]
    fitted_scores, fitted_threshold = gate.score_records(held), gate.threshold_
    entries = observe(gate, held[:30], rate=0.2)
    assert gate.learn(every=30)
    learnt = gate.score_records(held)
    gate.save(tmp_path / "learnt")
    loaded = Gate.load(tmp_path / "learnt", retriever=retriever, embedder=cached_embedder)
    np.testing.assert_allclose(loaded.score_records(held), learnt, rtol=0, atol=1e-12)
    assert loaded.threshold_ == gate.threshold_
    assert loaded.shadow_.entries() == entries and loaded.shadow_.learned == 30 and loaded.shadow_.refits == 1

    # one observation taken back: refitted as if it had never come
    loaded.withdraw_observation(entries[3])
    assert len(loaded.shadow_) == 29 and loaded.shadow_.learned == 29
    twin = Gate.load(tmp_path / "fitted", retriever=retriever, embedder=cached_embedder)
    for record, entry in zip(held[:30], entries):
        if entry is not entries[3]:
            twin.record_pair(
                served(twin, record), record.pred_one_retrieval, source=entry.source, probability=entry.probability
            )
    twin.refit_observations()
    np.testing.assert_allclose(loaded.score_records(held), twin.score_records(held), rtol=0, atol=1e-12)
    with pytest.raises(ValueError, match="holds no observation"):
        loaded.withdraw_observation(entries[3])

    # all of them taken back: the combiner the fit made, exactly
    for entry in entries:
        if entry is not entries[3]:
            loaded.withdraw_observation(entry)
    assert len(loaded.shadow_) == 0 and loaded.combiner_.target == "gain"
    np.testing.assert_allclose(loaded.score_records(held), fitted_scores, rtol=0, atol=1e-12)
    assert loaded.threshold_ == fitted_threshold


def test_a_verdict_teaches_through_the_feedback_api_and_is_withdrawn(gate, records) -> None:
    record = records[FIT]
    decision = served(gate, record)
    assert gate.learns_online
    entry = gate.record_decision_feedback(decision, correct=False)
    assert entry.question == record.question and entry.retrieved == decision.retrieve
    assert entry.label == (None if decision.retrieve else 1)
    assert len(gate.shadow_) == 1 and gate.shadow_.entries()[0].source == "verdict"
    gate.withdraw_feedback(entry)
    assert len(gate.shadow_) == 0
    with pytest.raises(ValueError, match="no verdict"):
        gate.withdraw_feedback(entry)
    fallback = GateDecision.fallback(record.question, gate.name, True, "retriever error")
    with pytest.raises(FeedbackNotSupportedError, match="nothing to learn from"):
        gate.record_decision_feedback(fallback, correct=True)


def test_the_shipped_gate_learns_from_observations_alone_once_it_has_enough(records, retriever, cached_embedder):
    gate = pretrained("draft-check", retriever=retriever, embedder=cached_embedder, keep_fit=True)
    assert gate.fit_rows_ is None
    before = gate.score_records(records[FIT:])
    observe(gate, records[FIT : FIT + MIN_ROWS - 1], rate=0.5)
    assert not gate.learn(every=1)  # fewer than a fit needs: the shipped combiner stays
    np.testing.assert_array_equal(gate.score_records(records[FIT:]), before)
    observe(gate, records[FIT + MIN_ROWS : FIT + 3 * MIN_ROWS], rate=0.5)
    assert {e.helps for e in gate.shadow_.entries()} == {0.0, 1.0}
    assert gate.learn(every=1) and gate.combiner_.target == "helps"
    assert not np.allclose(gate.score_records(records[FIT:]), before)


def test_a_hand_edited_log_is_refused(gate, records, retriever, cached_embedder, tmp_path) -> None:
    observe(gate, records[FIT : FIT + 3], rate=0.2)
    gate.save(tmp_path / "gate")
    log = tmp_path / "gate" / "shadow.jsonl"
    lines = log.read_text(encoding="utf-8").splitlines()
    lines[1] = json.dumps({**json.loads(lines[1]), "probability": 2.0})
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    with pytest.raises(GateLoadError, match=r"shadow\.jsonl"):
        Gate.load(tmp_path / "gate", retriever=retriever, embedder=cached_embedder)


def test_the_log_reader_names_the_line_it_cannot_read(gate, records, tmp_path) -> None:
    from adaptive_gates.gates.shadow.observations import ShadowLog

    observe(gate, records[FIT : FIT + 3], rate=0.2)
    log = gate.shadow_
    state = log.save(tmp_path)
    assert len(ShadowLog.load(tmp_path, state, log.n_features, log.width)) == 3
    path = tmp_path / "shadow.jsonl"
    lines = path.read_text(encoding="utf-8").splitlines()
    for edit, message in (
        ({"probability": 2.0}, "line 2: a field has the wrong type or value"),
        ({"source": "guess"}, "line 2: a field has the wrong type or value"),
        ({"helps": None}, "line 2: a field has the wrong type or value"),  # only a verdict may teach nothing
        ({"extra": 1}, "line 2: expected the fields"),
    ):
        path.write_text("\n".join([lines[0], json.dumps({**json.loads(lines[1]), **edit}), lines[2]]) + "\n")
        with pytest.raises(GateLoadError, match=message):
            ShadowLog.load(tmp_path, state, log.n_features, log.width)
    path.write_text("\n".join(lines[:2]) + "\n")
    with pytest.raises(GateLoadError, match="holds 2 observations"):
        ShadowLog.load(tmp_path, state, log.n_features, log.width)


def test_a_gate_reading_its_drafts_embedding_and_a_domain_learns_from_the_same_columns(
    records, retriever, cached_embedder, tmp_path
) -> None:
    nq = adarague_outcomes("nq")[:100]
    gate = DraftCheckGate(
        retriever=retriever,
        embedder=cached_embedder,
        embedding_dims=8,
        draft_embedding=True,
        draft_embedding_dims=4,
        domain_field="task",
        domain="hotpotqa",
    ).fit_outcomes([*records[:100], *nq])
    names = gate.combiner_.feature_names
    assert gate.fit_rows_ is not None and gate.fit_rows_.features.shape == (200, len(names))
    entries = observe(gate, records[FIT : FIT + 20], rate=0.5)
    _, features, _ = gate.shadow_.rows()
    assert features.shape == (20, len(names))
    assert features[:, names.index("domain=hotpotqa")].tolist() == [1.0] * 20
    assert gate.learn(every=20) and gate.combiner_.feature_names == names
    gate.save(tmp_path / "gate")
    loaded = Gate.load(tmp_path / "gate", retriever=retriever, embedder=cached_embedder)
    assert loaded.shadow_.entries() == entries
    np.testing.assert_allclose(loaded.score_records(records[FIT:]), gate.score_records(records[FIT:]))


def test_a_pair_is_read_with_the_certainty_stated_with_its_draft(gate, records) -> None:
    assert gate.self_report
    names = gate.combiner_.feature_names
    for stated, column in (("uncertain", "self_uncertain"), ("certain", "self_certain"), (None, None)):
        decision = served(gate, records[FIT])
        decision = dataclasses.replace(decision, details={**decision.details, "certainty": stated})
        gate.record_pair(decision, records[FIT].pred_one_retrieval, source="retrieved", probability=1.0)
        row = gate.shadow_.rows()[1][-1]
        said = {name: row[names.index(name)] for name in ("self_uncertain", "self_certain")}
        assert said == {name: float(name == column) for name in said}
