"""How well stated uncertainty matches correctness."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.evaluation.alignment import alignment_metrics
from adaptive_gates.records.selfknowledge import outcome_scores


def test_the_five_figures_on_a_small_case():
    figures = alignment_metrics([True, True, False, False], [1, 0, 1, 0])
    assert figures == {
        "uncertain_rate": 0.5,
        "accuracy": 0.5,
        "overconfidence": 0.25,  # sure and wrong
        "conservativeness": 0.25,  # unsure and right
        "alignment": 0.5,
    }


def test_graded_correctness_counts_as_right_at_one_half():
    figures = alignment_metrics([False, False, True], [0.5, 0.49, 0.9])
    assert figures["accuracy"] == pytest.approx(1 / 3 + 1 / 3)
    assert figures["overconfidence"] == pytest.approx(1 / 3)


def test_alignment_is_one_minus_the_two_errors_on_real_outcomes(outcome_records):
    records = outcome_records[:300]
    a, _ = outcome_scores(records, "contains")
    # a real stated-uncertainty proxy: long questions flagged uncertain
    lengths = np.array([len(r.question) for r in records])
    uncertain = lengths > np.median(lengths)
    figures = alignment_metrics(uncertain, a)
    assert figures["alignment"] == pytest.approx(1 - figures["overconfidence"] - figures["conservativeness"])
    assert figures["accuracy"] == pytest.approx(np.mean(a >= 0.5))
    assert figures["uncertain_rate"] == pytest.approx(uncertain.mean())
    perfect = alignment_metrics(a < 0.5, a)
    assert perfect["alignment"] == 1.0 and perfect["overconfidence"] == 0.0


def test_mismatched_or_empty_input_is_refused():
    with pytest.raises(ValueError, match=r"2 uncertainty flags for 3 correctness values"):
        alignment_metrics([True, False], [1, 0, 1])
    with pytest.raises(ValueError, match=r"at least one question"):
        alignment_metrics([], [])
