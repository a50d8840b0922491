"""SeaKR's self-aware reasoning: pick the final answer the LLM is surer of."""

from __future__ import annotations

import math

import pytest

from adaptive_gates.seakr.reasoning import AnswerCandidate, ReasoningSelector, Selection, is_usable
from adaptive_gates.seakr.reasoning_prompt import build_prompt
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty


def test_usable_answers():
    assert is_usable("Paris")
    for answer in (None, "", "  ", "Unknown", "unknown.", "The unknown"):
        assert not is_usable(answer), answer


def test_the_lower_uncertainty_wins_and_ties_go_first():
    selector = ReasoningSelector(SelfAwareUncertainty(k=2))
    chosen = selector.select(
        [
            AnswerCandidate("Lyon", uncertainty=-5.0, name="rationale"),
            AnswerCandidate("Paris", uncertainty=-6.0, name="knowledge"),
        ]
    )
    assert chosen == Selection("Paris", 1, "knowledge", (-5.0, -6.0), "lower uncertainty")
    tie = selector.select([AnswerCandidate("Lyon", uncertainty=1.0), AnswerCandidate("Paris", uncertainty=1.0)])
    assert tie.index == 0


def test_an_undefined_uncertainty_ranks_last():
    selector = ReasoningSelector(SelfAwareUncertainty(k=2))
    chosen = selector.select(
        [AnswerCandidate("Lyon", uncertainty=math.nan), AnswerCandidate("Paris", uncertainty=50.0)]
    )
    assert chosen.answer == "Paris"
    assert chosen.to_dict()["uncertainties"] == [None, 50.0]


def test_a_single_usable_answer_wins_without_any_uncertainty():
    selector = ReasoningSelector(SelfAwareUncertainty(k=2))
    # no prompt or U for the others: none is needed
    chosen = selector.select(
        [AnswerCandidate("unknown"), AnswerCandidate("Paris", name="knowledge"), AnswerCandidate(None)]
    )
    assert chosen.reason == "only usable answer" and chosen.answer == "Paris" and chosen.index == 1
    assert chosen.uncertainties == (None, None, None)


def test_with_no_usable_answer_all_compete():
    selector = ReasoningSelector(SelfAwareUncertainty(k=2))
    chosen = selector.select([AnswerCandidate("unknown", uncertainty=2.0), AnswerCandidate(None, uncertainty=1.0)])
    assert chosen.reason == "no usable answer" and chosen.index == 1 and chosen.answer is None


def test_uncertainty_is_estimated_from_the_prompts_with_the_real_model(lm, one_torch_thread):
    estimator = SelfAwareUncertainty(lm, k=2, max_new_tokens=6)
    selector = ReasoningSelector(estimator, stop=("\n",), formatted=True)
    prompts = [build_prompt("What is the capital of France?", demos=()), build_prompt("Who wrote Hamlet?", demos=())]
    chosen = selector.select(
        [AnswerCandidate("Paris", prompts[0], name="a"), AnswerCandidate("Shakespeare", prompts[1], name="b")]
    )
    u = chosen.uncertainties
    assert all(isinstance(x, float) for x in u)
    assert chosen.index == min((0, 1), key=lambda i: u[i] if math.isfinite(u[i]) else math.inf)
    assert chosen.reason == "lower uncertainty"


def test_bad_candidates_and_settings_are_refused():
    selector = ReasoningSelector(SelfAwareUncertainty(k=2))
    with pytest.raises(ValueError, match=r"non-empty sequence of AnswerCandidate"):
        selector.select([])
    with pytest.raises(ValueError, match=r"non-empty sequence of AnswerCandidate"):
        selector.select(["Paris"])
    with pytest.raises(ValueError, match=r"candidate 1 needs a prompt or an uncertainty"):
        selector.select([AnswerCandidate("Lyon", uncertainty=1.0), AnswerCandidate("Paris", prompt="  ")])
    with pytest.raises(ValueError, match=r"must be a SelfAwareUncertainty"):
        ReasoningSelector({"k": 2})
    with pytest.raises(ValueError, match=r"stop strings must be non-empty strings"):
        ReasoningSelector(stop=[""])
    assert ReasoningSelector(stop="\n").stop == ["\n"]
