"""``Assessment``: a gate's scores with what else it found, and the fallback reasons."""

from __future__ import annotations

import math

import numpy as np
import pytest

from adaptive_gates.gates.base.assessment import Assessment, Verdict
from adaptive_gates.records.data import Hit


def test_missing_parts_are_filled_with_one_none_per_score():
    assessment = Assessment([0.1, 0.7], [{"a": 1}, {"a": 2}])
    assert assessment.scores.dtype == np.float64
    assert assessment.drafts == [None, None]
    assert assessment.fallbacks == [None, None]
    assert assessment.verdicts == [None, None]
    assert list(assessment.llm_calls) == [None, None]
    assert assessment.passages == [None, None]


def test_parts_of_another_length_are_refused():
    with pytest.raises(ValueError, match=r"2 scores has parts of lengths"):
        Assessment([0.1, 0.2], [{}])
    with pytest.raises(ValueError, match=r"lengths"):
        Assessment([0.1, 0.2], [{}, {}], drafts=["only one"])
    with pytest.raises(ValueError, match=r"lengths"):
        Assessment([0.1], [{}], passages=[None, None])


def test_of_passes_an_assessment_through_and_wraps_a_pair():
    kept = Assessment([0.5], [{}], drafts=["Paris"])
    assert Assessment.of(kept) is kept
    wrapped = Assessment.of(([1, 2, 3], ({"i": 0}, {"i": 1}, {"i": 2})))
    assert isinstance(wrapped, Assessment)
    np.testing.assert_array_equal(wrapped.scores, [1.0, 2.0, 3.0])
    assert wrapped.details == [{"i": 0}, {"i": 1}, {"i": 2}]
    with pytest.raises(ValueError, match=r"lengths"):
        Assessment.of(([1, 2], [{}]))


def test_reason_prefers_the_stated_fallback_then_flags_non_finite_scores():
    hits = (Hit("p1", "Paris is the capital of France.", 0.9),)
    assessment = Assessment(
        [0.3, math.nan, math.inf, math.nan],
        [{}, {}, {}, {}],
        fallbacks=[None, None, None, "request failed: timeout"],
        verdicts=[Verdict(True, 0.2), None, None, None],
        llm_calls=[1, 0, 0, 1],
        passages=[hits, None, None, None],
    )
    assert assessment.reason(0) is None
    assert assessment.reason(1) == "backend error: non-finite score"
    assert assessment.reason(2) == "backend error: non-finite score"
    assert assessment.reason(3) == "request failed: timeout"
    assert assessment.verdicts[0] == Verdict(retrieve=True, threshold=0.2)
    assert assessment.passages[0] == hits


def test_a_stated_fallback_wins_even_over_a_finite_score():
    assessment = Assessment([0.4], [{}], fallbacks=["nothing to rate"])
    assert assessment.reason(0) == "nothing to rate"
