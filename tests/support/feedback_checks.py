"""The feedback rule of an SKR-kNN gate, checked the same in the core and both framework
suites: a verdict that a direct answer was wrong never lowers a need score nor moves the
threshold (so no decision goes from retrieve to direct), one that it was right never
raises a score, one on an answer with retrieval changes nothing."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from adaptive_gates import SKRKnnGate
from adaptive_gates.gates.base.feedback import Feedback
from adaptive_gates.records.answer_metrics import contains_answer
from adaptive_gates.records.selfknowledge import KNOWN, UNKNOWN

#: Runs a framework pipeline on a question: its answer, and how to record the verdict on it.
Ask = Callable[[str], tuple[str, Callable[[bool], Feedback]]]


class VerdictWatch:
    """The scores of ``probes`` before a verdict, checked against those after it."""

    def __init__(self, gate: SKRKnnGate, probes: Sequence[str]) -> None:
        self.gate, self.probes = gate, list(probes)
        self.threshold = gate.threshold_
        self.scores = gate.score(self.probes)

    def check(self, entry: Feedback) -> np.ndarray:
        """Check what the verdict ``entry`` did to every probe; the scores after it."""
        after = self.gate.score(self.probes)
        assert self.gate.threshold_ == self.threshold, f"{entry} moved the threshold"
        before_retrieves, after_retrieves = self.gate.retrieves(self.scores), self.gate.retrieves(after)
        if entry.label == UNKNOWN:
            fell = [q for q, old, new in zip(self.probes, self.scores, after) if new < old]
            turned = [q for q, old, new in zip(self.probes, before_retrieves, after_retrieves) if old and not new]
            assert not fell and not turned, f"{entry}: scores fell for {fell}, went direct for {turned}"
        elif entry.label == KNOWN:
            rose = [q for q, old, new in zip(self.probes, self.scores, after) if new > old]
            turned = [q for q, old, new in zip(self.probes, before_retrieves, after_retrieves) if new and not old]
            assert not rose and not turned, f"{entry}: scores rose for {rose}, went to retrieval for {turned}"
        else:
            np.testing.assert_array_equal(after, self.scores, err_msg=f"{entry} moved scores")
        self.scores = after
        return after


def check_rounds_of_judged_answers(
    gate: SKRKnnGate, ask: Ask, gold: dict[str, list[str]], probes: Sequence[str]
) -> list[Feedback]:
    """``gate.k`` rounds in which each question of ``gold`` is answered through ``ask``,
    judged against its gold answers, and the verdict recorded; the rule is checked after
    each. Greedy answers repeat, so a question answered directly and wrongly is judged so
    again while it is answered directly, and after ``k`` such verdicts its k nearest are
    its unknown copies (score 1): by the end every question judged wrong retrieves (for
    questions far enough apart that a right verdict on one does not pull another back)."""
    watch = VerdictWatch(gate, [*gold, *probes])
    entries = []
    for _ in range(gate.k):
        for question, answers in gold.items():
            answer, record = ask(question)
            entries.append(record(bool(contains_answer(answer, answers))))
            assert entries[-1].question == question
            watch.check(entries[-1])
    wrong = {e.question for e in entries if e.label == UNKNOWN}
    assert wrong, "no direct answer was judged wrong: the rule was not exercised"
    assert all(gate.decide(q).retrieve for q in wrong)
    return entries
