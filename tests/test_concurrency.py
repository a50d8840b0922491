"""Deciding from many threads while the memory grows."""

import threading
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from adaptive_gates import SKRKnnGate


def test_many_threads_decide_while_another_adds(outcome_records, embedder):
    n = len(outcome_records)
    base, extra = outcome_records[: n * 2 // 5], outcome_records[n * 2 // 5 : n * 4 // 5]
    probes = [r.question for r in outcome_records[n * 4 // 5 :]][:60]
    gate = SKRKnnGate(embedder, k=5).fit_outcomes(base)
    size_before = len(gate.memory_)
    from adaptive_gates import label_outcomes

    extra_knowledge = label_outcomes(extra)
    stop = threading.Event()
    seen_sizes = []

    def writer():
        qs, labels = extra_knowledge.questions, extra_knowledge.labels
        for start in range(0, len(qs), 10):
            gate.add(qs[start : start + 10], labels[start : start + 10])
            seen_sizes.append(len(gate.memory_))
        stop.set()

    def reader(i):
        decisions = []
        while not stop.is_set() or not decisions:
            d = gate.decide(probes[i % len(probes)])
            assert d.error is None, d.error
            assert len(d.details["neighbours"]) == 5
            assert d.details["neighbours"][0]["question"] in gate.memory_.questions
            decisions.append(d)
        return len(decisions)

    with ThreadPoolExecutor(max_workers=9) as pool:
        readers = [pool.submit(reader, i) for i in range(8)]
        pool.submit(writer).result()
        counts = [f.result() for f in readers]

    assert all(c >= 1 for c in counts)
    assert len(gate.memory_) == size_before + len(extra_knowledge.questions)
    assert seen_sizes == sorted(seen_sizes)
    # Once writing is done, the grown gate decides exactly like one fitted on everything at once.
    fresh = SKRKnnGate(embedder, k=5).fit(
        gate.memory_.questions, gate.memory_.labels.tolist()
    )
    np.testing.assert_allclose(gate.score(probes), fresh.score(probes))
    assert [d.retrieve for d in gate.decide_batch(probes)] == [d.retrieve for d in fresh.decide_batch(probes)]
