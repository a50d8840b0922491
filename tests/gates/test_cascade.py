"""The cascade: only questions whose cheap score is in the band reach the costly gate
(counted through the LLM-call listener events, with the real verbalized gate on the
embedded SmolLM2), each branch of its decision logic with a scripted chat model, and
its stages saved in sub-folders of its own (in a budget's too), or flat as before."""

from __future__ import annotations

import asyncio
import json
import shutil

import numpy as np
import pytest

from adaptive_gates import (
    BudgetedGate,
    CascadeGate,
    DecisionListener,
    GateLoadError,
    LogprobGate,
    SKRClassifierGate,
    SKRKnnGate,
    VerbalizedGate,
    listening,
    load_gate,
)
from adaptive_gates.models.chat.base import ChatReply
from adaptive_gates.persistence.saved_format import with_checksums
from gates.test_skr_prompt import ScriptedChat
from support.saved_layouts import flatten_members


class Calls(DecisionListener):
    def __init__(self) -> None:
        self.events = []

    def on_llm_call(self, event) -> None:
        self.events.append(event)


@pytest.fixture(scope="module")
def knn(outcome_records, cached_embedder) -> SKRKnnGate:
    return SKRKnnGate(cached_embedder, k=10, weighting="similarity").fit_outcomes(outcome_records)


@pytest.fixture(scope="module")
def questions(qa_records) -> list[str]:
    return [r.question for r in qa_records[:8]]


def _middle_band(knn: SKRKnnGate, questions: list[str]) -> tuple[tuple[float, float], list[int]]:
    """A band around the middle two cheap scores, and the questions in it."""
    scores = knn.score(questions)
    order = np.argsort(scores)
    lo, hi = scores[order[len(order) // 2 - 1]], scores[order[len(order) // 2]]
    inside = [i for i, s in enumerate(scores) if lo <= s <= hi]
    assert 0 < len(inside) < len(questions)
    return (float(lo), float(hi)), inside


def test_only_the_band_reaches_the_embedded_llm(knn, questions, one_torch_thread) -> None:
    band, inside = _middle_band(knn, questions[:4])
    cascade = CascadeGate(knn, VerbalizedGate(), band=band)
    calls = Calls()
    with listening(calls):
        decisions = cascade.decide_batch(questions[:4])
    stages = [d.details["stage"] for d in decisions]
    escalated = [i for i, d in enumerate(decisions) if "costly" in d.details]
    assert escalated == inside
    assert all(stages[i] == "costly" for i in inside if not decisions[i].details.get("costly_error"))
    assert calls.events and all(e.gate == "verbalized" for e in calls.events)
    assert len(calls.events) == sum(d.llm_calls for d in decisions)
    first_turns = [e for e in calls.events if e.purpose == "answer+certainty"]
    asked = {i for i in range(4) for e in first_turns if questions[i] in e.messages[0]["content"]}
    assert asked == set(inside) and len(first_turns) == len(inside)
    assert all(d.llm_calls == 0 for i, d in enumerate(decisions) if i not in inside)


def _scripted(reply) -> VerbalizedGate:
    return VerbalizedGate(ScriptedChat({"ask": reply}))


def test_an_uncertain_costly_stage_retrieves_above_the_band_midpoint(knn, questions) -> None:
    band, inside = _middle_band(knn, questions)
    cascade = CascadeGate(knn, _scripted(ChatReply("Paris (uncertain)")), band=band)
    decisions = cascade.decide_batch(questions)
    midpoint = sum(band) / 2
    for i in inside:
        d = decisions[i]
        assert d.details["stage"] == "costly" and d.retrieve and d.threshold == midpoint
        assert midpoint < d.score <= band[1] and d.llm_calls == 1 and d.draft_answer is None
        assert d.answer_without_retrieval == "Paris"  # the costly stage's, for an evaluation to reuse
    for i in set(range(len(questions))) - set(inside):
        d = decisions[i]
        assert d.details["stage"] == "cheap" and d.threshold == knn.threshold_ and "costly" not in d.details
        assert d.answer_without_retrieval is None
        assert d.retrieve == (d.details["cheap"]["score"] > knn.threshold_) and d.score == d.details["cheap"]["score"]


def test_a_certain_costly_stage_answers_directly_with_its_draft(knn, questions) -> None:
    band, inside = _middle_band(knn, questions)
    decisions = CascadeGate(knn, _scripted(ChatReply("Paris, certain.")), band=band).decide_batch(questions)
    for i in inside:
        assert not decisions[i].retrieve and decisions[i].draft_answer == "Paris"
        assert band[0] <= decisions[i].score < sum(band) / 2


def test_a_failing_costly_stage_leaves_the_cheap_verdict(knn, questions) -> None:
    band, inside = _middle_band(knn, questions)
    cheap = knn.decide_batch(questions)
    decisions = CascadeGate(knn, _scripted(ConnectionError("down")), band=band).decide_batch(questions)
    assert [d.retrieve for d in decisions] == [d.retrieve for d in cheap]
    assert not any(d.is_fallback for d in decisions)
    for i in inside:
        assert decisions[i].details["stage"] == "cheap" and "down" in decisions[i].details["costly_error"]


@pytest.mark.parametrize(
    "costly",
    [ChatReply("Paris (uncertain)"), ChatReply("Paris, certain."), ConnectionError("down")],
    ids=["uncertain", "certain", "failing"],
)
def test_awaited_decisions_are_the_blocking_ones(knn, questions, costly) -> None:
    band, _ = _middle_band(knn, questions)
    cascade = CascadeGate(knn, _scripted(costly), band=band)
    blocking = cascade.decide_batch(questions)
    awaited = asyncio.run(cascade.adecide_batch(questions))
    assert [(d.retrieve, d.score, d.threshold, d.details, d.draft_answer, d.error) for d in awaited] == [
        (d.retrieve, d.score, d.threshold, d.details, d.draft_answer, d.error) for d in blocking
    ]
    assert any(d.details["stage"] == "costly" or "costly_error" in d.details for d in awaited)


def test_a_failing_cheap_stage_gives_fallbacks_blocking_or_awaited(knn, questions) -> None:
    no_logprobs = LogprobGate(ScriptedChat({"ask": ChatReply("Paris")}))  # raises: it needs log-probabilities
    cascade = CascadeGate(no_logprobs, _scripted(ChatReply("Paris (uncertain)")), band=(0.0, 1.0))
    for decisions in (cascade.decide_batch(questions[:2]), asyncio.run(cascade.adecide_batch(questions[:2]))):
        assert all(d.is_fallback and "the cheap stage (logprob) failed" in d.error for d in decisions)


@pytest.mark.parametrize(("rate", "asked"), [(0.0, 0), (0.5, 4), (1.0, 8)])
def test_a_fitted_band_escalates_its_share(knn, questions, rate, asked) -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris (uncertain)")})
    cascade = CascadeGate(knn, VerbalizedGate(chat), escalation_rate=rate).fit_band(questions)
    cascade.decide_batch(questions)
    assert len(chat.calls) == asked == round(cascade.fitted_band_["realised_share"] * len(questions))
    assert (cascade.band_ is None) == (rate == 0)


def test_a_calibrated_cascade_decides_by_one_threshold(knn, questions) -> None:
    band, _ = _middle_band(knn, questions)
    cascade = CascadeGate(knn, _scripted(ChatReply("Paris (uncertain)")), band=band)
    cascade.calibrate(questions * 3, target_rate=0.25)
    decisions = cascade.decide_batch(questions)
    assert all(d.threshold == cascade.threshold_ and d.retrieve == (d.score > d.threshold) for d in decisions)


def test_a_cascade_without_band_is_refused(knn) -> None:
    with pytest.raises(ValueError, match=r"band=.*or escalation_rate"):
        CascadeGate(knn, VerbalizedGate())
    with pytest.raises(ValueError, match="lo <= hi"):
        CascadeGate(knn, VerbalizedGate(), band=(0.6, 0.2))
    assert not CascadeGate(knn, VerbalizedGate(), escalation_rate=0.2).is_fitted


def test_a_saved_cascade_loads_with_each_stage_s_backend(knn, questions, tmp_path) -> None:
    chat = ScriptedChat({"ask": ChatReply("Paris (uncertain)")})
    cascade = CascadeGate(knn, VerbalizedGate(chat), escalation_rate=0.5).fit_band(questions)
    path = cascade.save(tmp_path / "cascade")
    # each stage a saved gate of its own in its sub-folder, the cascade's state pointing to it
    config = json.loads((path / "config.json").read_text())
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == ["cheap", "costly"]
    assert (config["state"]["cheap"], config["state"]["costly"]) == ({"folder": "cheap"}, {"folder": "costly"})
    assert sorted(config["folders"]) == ["cheap", "costly"]
    assert {"config.json", "labels.npy"} <= {p.name for p in (path / "cheap").iterdir()}
    assert json.loads((path / "costly" / "config.json").read_text())["gate_type"] == "verbalized"
    np.testing.assert_array_equal(
        load_gate(path / "cheap", embedder=knn.embedder).score(questions), knn.score(questions)
    )
    loaded = load_gate(path, embedder=knn.embedder, chat=chat)
    assert isinstance(loaded, CascadeGate) and loaded.band_ == cascade.band_
    assert [d.retrieve for d in loaded.decide_batch(questions)] == [d.retrieve for d in cascade.decide_batch(questions)]
    cascade.save(path, overwrite=True)
    config = json.loads((path / "config.json").read_text())
    config["state"]["fitted_band"]["band"] = [0.0, 1.0]
    (path / "config.json").write_text(json.dumps(config))
    with pytest.raises(GateLoadError, match="modified after saving"):
        load_gate(path, embedder=knn.embedder, chat=chat)


def test_a_tampered_stage_file_is_refused(knn, questions, tmp_path) -> None:
    cascade = CascadeGate(knn, _scripted(ChatReply("Paris (uncertain)")), band=(0.2, 0.4))
    path = cascade.save(tmp_path / "cascade")
    labels = np.load(path / "cheap" / "labels.npy")
    np.save(path / "cheap" / "labels.npy", 1 - labels)
    with pytest.raises(GateLoadError, match=r"cheap stage .*/cheap: file 'labels\.npy' does not match"):
        load_gate(path, embedder=knn.embedder)

    # the stage's parameters edited and its config.json signed again: the cascade's checksum of it differs
    path = cascade.save(tmp_path / "edited")
    stage = json.loads((path / "cheap" / "config.json").read_text())
    stage["params"]["k"] = 3
    (path / "cheap" / "config.json").write_text(json.dumps(with_checksums(stage)))
    with pytest.raises(GateLoadError, match=r"file 'cheap/config\.json' does not match its checksum"):
        load_gate(path, embedder=knn.embedder)


@pytest.fixture(scope="module")
def budgeted_cascade(knn, outcome_records, questions) -> BudgetedGate:
    """A budget around a cascade of two real SKR gates (no LLM): members two levels deep."""
    costly = SKRClassifierGate(knn.embedder).fit_outcomes(outcome_records)
    budget = BudgetedGate(CascadeGate(knn, costly, escalation_rate=0.5).fit_band(questions), target_rate=0.5, window=20)
    budget.decide_batch(questions)  # a live window to save
    return budget


def test_a_budget_around_a_cascade_saves_folders_in_folders(budgeted_cascade, knn, questions, tmp_path) -> None:
    path = budgeted_cascade.save(tmp_path / "budget")
    assert sorted(p.relative_to(path).as_posix() for p in path.rglob("*") if p.is_dir()) == [
        "gate",
        "gate/cheap",
        "gate/costly",
    ]
    assert (path / "gate" / "costly" / "coef.npy").is_file()
    loaded = load_gate(path, embedder=knn.embedder)
    assert isinstance(loaded.gate, CascadeGate) and isinstance(loaded.gate.costly, SKRClassifierGate)
    np.testing.assert_array_equal(loaded.gate.costly.score(questions), budgeted_cascade.gate.costly.score(questions))
    assert [d.retrieve for d in loaded.decide_batch(questions)] == [
        d.retrieve for d in budgeted_cascade.decide_batch(questions)
    ]
    budgeted_cascade.save(path, overwrite=True)  # a saved holder, member folders and all, may be replaced
    # a file two levels down is covered by the checksums too
    coef = np.load(path / "gate" / "costly" / "coef.npy")
    np.save(path / "gate" / "costly" / "coef.npy", coef * 2)
    with pytest.raises(GateLoadError, match=r"costly stage .*/gate/costly: file 'coef\.npy' does not match"):
        load_gate(path, embedder=knn.embedder)


def test_a_budget_around_a_cascade_saved_flat_still_loads(budgeted_cascade, knn, questions, tmp_path) -> None:
    path = budgeted_cascade.save(tmp_path / "saved")
    loaded = load_gate(path, embedder=knn.embedder)
    flat = flatten_members(shutil.copytree(path, tmp_path / "flat"))
    assert not [p for p in flat.iterdir() if p.is_dir()]
    assert {"gate.cheap.labels.npy", "gate.costly.coef.npy", "budget_scores.npy"} <= {p.name for p in flat.iterdir()}
    state = json.loads((flat / "config.json").read_text())["state"]
    assert state["gate"]["prefix"] == "gate" and state["gate"]["config"]["state"]["cheap"]["prefix"] == "cheap"
    from_flat = load_gate(flat, embedder=knn.embedder)
    assert isinstance(from_flat.gate, CascadeGate) and from_flat.gate.band_ == loaded.gate.band_
    assert from_flat.threshold_ == loaded.threshold_ and from_flat.window_rate_ == loaded.window_rate_
    np.testing.assert_array_equal(from_flat.gate.score(questions), loaded.gate.score(questions))
    assert [d.retrieve for d in from_flat.decide_batch(questions)] == [
        d.retrieve for d in loaded.decide_batch(questions)
    ]
    # a flat file changed is refused as before, by the holder's checksums
    labels = np.load(flat / "gate.cheap.labels.npy")
    np.save(flat / "gate.cheap.labels.npy", 1 - labels)
    with pytest.raises(GateLoadError, match=r"file 'gate\.cheap\.labels\.npy' does not match its checksum"):
        load_gate(flat, embedder=knn.embedder)
    budgeted_cascade.save(flat, overwrite=True)  # a gate saved flat may be replaced by one with folders
    assert (flat / "gate" / "cheap" / "labels.npy").is_file() and not (flat / "gate.cheap.labels.npy").exists()
