"""Deciding from many threads while the memory grows and the threshold moves."""

import itertools
import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from adaptive_gates import SKRKnnGate, label_outcomes
from adaptive_gates.records.selfknowledge import KNOWN, UNKNOWN

#: Decisions each reader makes at least (it goes on while the writers are busy).
MIN_DECISIONS = 40
ADD_BATCH = 5


def _thirds(records):
    n = len(records)
    return records[: n // 3], records[n // 3 : 2 * n // 3], records[2 * n // 3 :]


def test_every_decision_is_consistent_while_others_add_and_recalibrate(outcome_records, embedder):
    base, extra, rest = _thirds(outcome_records)
    probes = [r.question for r in rest]
    gate = SKRKnnGate(embedder, k=5).fit_outcomes(base)
    size_before = len(gate.memory_)
    knowledge = label_outcomes(extra)
    # One writer adds only known questions, the other only unknown ones, so the ratio
    # rule's threshold n/(m+n) swings with every add; a third thread moves the
    # threshold by calibrating and resetting it.
    by_label = {
        label: [q for q, lab in zip(knowledge.questions, knowledge.labels) if lab == label]
        for label in (KNOWN, UNKNOWN)
    }
    probe_scores = gate.score(probes)
    writing = threading.Barrier(3)
    done = threading.Event()

    def writer(label):
        writing.wait()
        qs = by_label[label]
        for start in range(0, len(qs), ADD_BATCH):
            gate.add(qs[start : start + ADD_BATCH], [label] * len(qs[start : start + ADD_BATCH]))

    def calibrator():
        writing.wait()
        for rate in itertools.cycle([0.2, 0.8]):
            if done.is_set():
                return
            gate.calibrate_scores(probe_scores, rate)
            gate.reset_threshold()

    def reader(i):
        decisions = []
        while not done.is_set() or len(decisions) < MIN_DECISIONS:
            batch = [probes[(i + j * 7 + len(decisions)) % len(probes)] for j in range(1 + len(decisions) % 3)]
            decisions.extend(gate.decide_batch(batch))
        return decisions

    with ThreadPoolExecutor(max_workers=9) as pool:
        readers = [pool.submit(reader, i) for i in range(6)]
        calibrating = pool.submit(calibrator)
        writers = [pool.submit(writer, label) for label in (KNOWN, UNKNOWN)]
        for w in writers:
            w.result()
        done.set()
        calibrating.result()
        decisions = [d for r in readers for d in r.result()]

    assert len(decisions) >= 6 * MIN_DECISIONS
    for d in decisions:
        assert d.error is None, d.error
        assert len(d.details["neighbours"]) == 5
        # One threshold per decision: the recorded one is the one the rule applied
        # (the ratio rule has no tie exception: a D- share equal to n/(m+n) is known).
        assert d.retrieve == (d.score > d.threshold), (d.score, d.threshold, d.retrieve)
    # The threshold really moved while they decided, so the check above had teeth.
    assert len({d.threshold for d in decisions}) > 2

    stored, labels, questions = gate.memory_.entries()
    assert len(gate.memory_) == len(questions) == size_before + len(knowledge.questions)
    assert sorted(zip(questions, labels.tolist())) == sorted(
        [*zip(label_outcomes(base).questions, label_outcomes(base).labels), *zip(knowledge.questions, knowledge.labels)]
    )
    # Every stored vector still belongs to its question (cosine ~1; a one-off embedding
    # differs from a batched one by float32 padding noise only, ~1e-6).
    fresh = embedder.embed(questions)
    fresh /= np.linalg.norm(fresh, axis=1, keepdims=True)
    assert np.all(np.sum(stored * fresh, axis=1) > 0.999)
