"""The runtime budget: the realised retrieval rate held at the target over a stream of
real questions whose difficulty shifts halfway, the drift flag, the per-request
override, decisions from many threads, and persistence.

The gate is SKR-kNN on the real MiniLM over outcome records of an easy and a hard
task (AdaRAGUE NQ and MuSiQue, Llama-3.1-8B answers); the stream is unseen NQ-open
questions, then unseen MuSiQue ones, which its memory marks unknown far more often.
"""

from __future__ import annotations

import json
import math
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from adaptive_gates import BudgetedGate, DecisionListener, GateLoadError, SKRKnnGate, label_outcomes, load_gate
from adaptive_gates.records.data import load_outcomes, load_qa
from support.shared_data import SHARED_DATA, reads_shared_data

TARGET, WINDOW = 0.3, 200
N_CALIBRATION, N_EASY, N_HARD = 200, 300, 250


class _Stream:
    """The memory's labelled questions, calibration questions, and the stream's two halves."""

    def __init__(self, memory: tuple[list[str], list[int]], calibration, easy, hard) -> None:
        self.memory, self.calibration, self.easy, self.hard = memory, calibration, easy, hard


@pytest.fixture(scope="module")
@reads_shared_data
def stream(outcome_records) -> _Stream:
    if SHARED_DATA:
        musique = load_outcomes(SHARED_DATA / "adarague" / "musique.train.jsonl")
        nq_dev = [r.question for r in load_qa(SHARED_DATA / "nq_open_dev.jsonl")]
        knowledge = label_outcomes(outcome_records[:250] + musique[:250])
        return _Stream(
            (knowledge.questions, knowledge.labels),
            nq_dev[:N_CALIBRATION],
            nq_dev[N_CALIBRATION : N_CALIBRATION + N_EASY],
            [r.question for r in musique[250 : 250 + N_HARD]],
        )
    from adaptive_gates.bundled.datasets import packaged_qa

    # Without the shared data no outcome records mark one task hard and the other easy, so
    # the memory's labels stand in by task: BoolQ questions known, TruthfulQA ones not. The
    # stream is unseen BoolQ questions, then unseen TruthfulQA ones: the same shift.
    boolq = [r.question for r in packaged_qa("boolq")]
    truthful = [r.question for r in packaged_qa("truthfulqa")]
    memory = (boolq[:150] + truthful[:150], [0] * 150 + [1] * 150)
    return _Stream(
        memory,
        boolq[150 : 150 + N_CALIBRATION],
        boolq[150 + N_CALIBRATION : 150 + N_CALIBRATION + N_EASY],
        truthful[150 : 150 + N_HARD],
    )


@pytest.fixture(scope="module")
def knn(stream, cached_embedder) -> SKRKnnGate:
    return SKRKnnGate(cached_embedder, k=10, weighting="similarity").fit(*stream.memory)


def _decide_stream(gate: BudgetedGate, questions: list[str], batch: int = 10):
    return [d for i in range(0, len(questions), batch) for d in gate.decide_batch(questions[i : i + batch])]


def test_the_budget_holds_and_drift_is_flagged_after_the_shift_only(knn, stream, caplog) -> None:
    questions = stream.easy + stream.hard
    unbudgeted = knn.retrieves(knn.score(questions))
    assert unbudgeted.mean() > TARGET + 0.05  # the gate alone overspends: the budget has work to do
    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    with caplog.at_level("WARNING", logger="adaptive_gates.gates.budget"):
        decisions = _decide_stream(gate, questions)
    retrieved = np.array([d.retrieve for d in decisions])
    windows = [retrieved[i - WINDOW : i].mean() for i in range(WINDOW, len(retrieved) + 1)]
    assert max(windows) <= TARGET + 1e-9  # never above the target over any window
    for part in (retrieved[:N_EASY], retrieved[N_EASY:], retrieved):
        assert abs(part.mean() - TARGET) <= 0.02
    drift = [d.details["budget"]["drift"] for d in decisions]
    assert not any(drift[:N_EASY]) and drift[-1]
    assert any("drifted" in r.message for r in caplog.records)
    last = decisions[-1].details["budget"]
    assert last["drift_statistic"] > last["drift_threshold"] and gate.drift_
    assert all(d.gate == "budget" and d.details["budget"]["gate"] == "skr-knn" for d in decisions)
    assert all(
        d.retrieve == (d.score > d.threshold)
        for d in decisions
        if not d.details["budget"]["capped"] and d.score != d.threshold
    )


def test_tied_scores_still_reach_the_target(stream, cached_embedder) -> None:
    # A uniform kNN vote takes 11 values: most scores tie with the quantile.
    knn = SKRKnnGate(cached_embedder, k=10).fit(*stream.memory)
    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    retrieved = np.array([d.retrieve for d in _decide_stream(gate, stream.easy)])
    assert abs(retrieved.mean() - TARGET) <= 0.02
    assert any(d.details["budget"]["tie_share"] for d in gate.decide_batch(stream.calibration[:40]))


def test_before_the_window_fills_the_gate_s_own_threshold_decides_without_calibration(knn, stream) -> None:
    gate = BudgetedGate(knn, target_rate=TARGET, window=50, min_scores=20)
    first = gate.decide_batch(stream.easy[:20])
    assert all(d.details["budget"]["warmup"] and d.threshold == knn.threshold_ for d in first)
    later = gate.decide(stream.easy[20])  # the 20 scores seen before it make the quantile
    assert not later.details["budget"]["warmup"] and later.details["budget"]["tie_share"] is not None
    # The first full window of traffic becomes the drift reference.
    assert all(d.details["budget"]["drift_statistic"] is None for d in first)
    full = gate.decide_batch(stream.easy[21:60])
    assert full[-1].details["budget"]["drift_statistic"] is not None


def test_a_request_can_force_the_decision_outside_the_budget(knn, stream) -> None:
    class Seen(DecisionListener):
        def __init__(self) -> None:
            self.decisions = []

        def on_decision(self, decision) -> None:
            self.decisions.append(decision)

    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    seen = Seen()
    gate.add_listener(seen)
    gate.decide_batch(stream.easy[:5])
    always = gate.decide(stream.easy[5], retrieval="always")
    never = gate.decide_batch(stream.easy[6:8], retrieval="never")
    assert always.retrieve and not any(d.retrieve for d in never)
    assert (
        math.isnan(always.score) and always.details == {"forced": "always"} and never[0].details == {"forced": "never"}
    )
    assert gate.decide(stream.easy[8]).details["budget"]["window"] == 6  # forced decisions stay outside
    assert seen.decisions[5] is always and seen.decisions[6:8] == never
    with pytest.raises(ValueError, match="retrieval must be one of"):
        gate.decide(stream.easy[0], retrieval="sometimes")


def test_async_decisions_follow_the_same_budget(knn, stream) -> None:
    import asyncio

    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    twin = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    awaited = asyncio.run(gate.adecide_batch(stream.easy[:30]))
    assert [d.retrieve for d in awaited] == [d.retrieve for d in twin.decide_batch(stream.easy[:30])]
    assert asyncio.run(gate.adecide(stream.easy[0], retrieval="never")).details == {"forced": "never"}


def test_decisions_from_many_threads_keep_the_budget(knn, stream) -> None:
    gate = BudgetedGate(knn, target_rate=TARGET, window=100).calibrate(stream.calibration)
    questions = stream.easy[:240]
    with ThreadPoolExecutor(max_workers=6) as pool:
        decisions = list(pool.map(gate.decide, questions))
    assert len(decisions) == len(questions) and not any(d.is_fallback for d in decisions)
    assert gate.window_rate_ <= TARGET + 1e-9 and len(gate._retrieved) == 100
    assert sum(d.retrieve for d in decisions) <= math.floor(TARGET * 100) * math.ceil(len(questions) / 100)


def test_outcome_calibration_is_refused(knn, stream) -> None:
    gate = BudgetedGate(knn, target_rate=TARGET)
    with pytest.raises(ValueError, match="calibrate the wrapped gate on outcomes"):
        gate.calibrate(stream.calibration[:30], correct_without=[0] * 30, correct_with=[1] * 30)
    with pytest.raises(ValueError, match="target_rate must be"):
        BudgetedGate(knn, target_rate=1.5)


def test_a_saved_budget_resumes_where_it_stopped(knn, stream, cached_embedder, tmp_path) -> None:
    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    _decide_stream(gate, stream.easy[:120])
    gate.save(tmp_path / "budget")
    # the wrapped gate is a saved gate of its own in the sub-folder "gate"
    assert json.loads((tmp_path / "budget" / "gate" / "config.json").read_text())["gate_type"] == "skr-knn"
    loaded = load_gate(tmp_path / "budget", embedder=cached_embedder)
    assert isinstance(loaded, BudgetedGate) and isinstance(loaded.gate, SKRKnnGate)
    assert loaded.threshold_ == gate.threshold_ and loaded.window_rate_ == gate.window_rate_
    after, after_loaded = _decide_stream(gate, stream.hard[:60]), _decide_stream(loaded, stream.hard[:60])
    assert [(d.retrieve, d.threshold) for d in after] == [(d.retrieve, d.threshold) for d in after_loaded]
    gate.save(tmp_path / "budget", overwrite=True)  # a saved budget may be replaced


@pytest.mark.parametrize(
    "target, message",
    [
        ("budget_scores.npy", r"file 'budget_scores\.npy' does not match its checksum"),
        ("gate/labels.npy", r"wrapped gate cannot be loaded: .*/gate: file 'labels\.npy' does not match"),
        ("gate/config.json", r"file 'gate/config\.json' does not match its checksum"),
    ],
)
def test_a_tampered_budget_is_refused(knn, stream, cached_embedder, tmp_path, target, message) -> None:
    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW).calibrate(stream.calibration)
    gate.decide_batch(stream.easy[:20])
    path = gate.save(tmp_path / "budget")
    if target == "gate/config.json":
        config = json.loads((path / target).read_text())
        config["params"]["k"] = 3  # the wrapped gate's own parameters
        (path / target).write_text(json.dumps(config))
    else:
        array = np.load(path / target)
        array[0] = 1 - array[0] if array.dtype == np.int8 else array[0] + 0.5
        np.save(path / target, array)
    with pytest.raises(GateLoadError, match=message):
        load_gate(path, embedder=cached_embedder)


def test_a_budget_lock_serialises_decisions_with_a_save(knn, stream, tmp_path) -> None:
    gate = BudgetedGate(knn, target_rate=TARGET, window=50).calibrate(stream.calibration)
    stop = threading.Event()

    def decide() -> None:
        while not stop.is_set():
            gate.decide(stream.easy[0])

    worker = threading.Thread(target=decide)
    worker.start()
    try:
        for i in range(3):
            load_gate(gate.save(tmp_path / f"b{i}"), embedder=knn.embedder)  # its threshold check passes
    finally:
        stop.set()
        worker.join()


def test_calibrating_never_changes_the_budget(knn, stream):
    gate = BudgetedGate(knn, target_rate=TARGET, window=WINDOW)
    gate.calibrate(stream.calibration, TARGET)  # the same rate: accepted
    with pytest.raises(ValueError, match=r"its target_rate parameter \(0\.3\).*set_params\(target_rate=0\.2\)"):
        gate.calibrate(stream.calibration, 0.2)
    assert gate.target_rate == TARGET
    assert gate.set_params(target_rate=0.2).target_rate == 0.2 and gate.is_fitted  # a serving parameter
