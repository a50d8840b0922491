"""SeaKR's final answer: the rationale and knowledge routes, and the choice by U."""

from __future__ import annotations

import math

import pytest

from adaptive_gates.records.answer_metrics import extract_seakr_answer
from adaptive_gates.records.data import Hit
from adaptive_gates.seakr.reasoning import ReasoningSelector, is_usable
from adaptive_gates.seakr.reasoning_prompt import DEFAULT_DEMOS, build_prompt
from adaptive_gates.seakr.routes import FinalAnswer
from adaptive_gates.seakr.trace import SeaKRResult, Step
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty

QUESTION = "What is the capital of the country whose national bird is the kiwi?"
DEMOS = DEFAULT_DEMOS[:2]


@pytest.fixture(scope="module")
def writer(lm, one_torch_thread):
    def prompt(question, steps=(), documents=()):
        return build_prompt(question, steps, documents, demos=DEMOS)

    def greedy(text, stop, max_new_tokens):
        return lm.generate(text, max_new_tokens=max_new_tokens, stop=list(stop), formatted=True)[0]

    return FinalAnswer(prompt, greedy, "reread", step_tokens=8, answer_tokens=24)


@pytest.fixture(scope="module")
def selector(lm):
    return ReasoningSelector(SelfAwareUncertainty(lm, k=2, max_new_tokens=8), formatted=True)


def test_the_loop_answer_is_kept_without_selection(writer):
    assert writer.unselected(QUESTION, ["The kiwi is New Zealand's bird."], "wellington") == "wellington"
    result = SeaKRResult(QUESTION, "multihop", loop_answer="wellington")
    writer.finish(result, [], None)
    assert result.answer == "wellington" and result.routes == [] and result.chosen_route is None


def test_without_a_loop_answer_the_model_is_asked_for_one(writer):
    answer = writer.unselected(QUESTION, ["The kiwi is the national bird of New Zealand."], None)
    assert answer == answer.lower() and not answer.endswith(".")
    assert answer.strip() == answer


def test_both_routes_compete_by_uncertainty(writer, selector):
    step = Step(0, text="The kiwi is the national bird of New Zealand.", uncertainty=-1.0)
    result = SeaKRResult(QUESTION, "multihop", steps=[step])
    read = [Hit("p1", "Wellington is the capital of New Zealand.", 3.0, "Wellington")]
    writer.finish(result, read, selector)
    assert [r.name for r in result.routes] == ["rationale", "knowledge"]
    for route in result.routes:
        assert route.answer == extract_seakr_answer(route.text)
    knowledge = result.routes[1]
    assert "Wellington" in knowledge.text and knowledge.answer == "wellington"  # read from the passage
    usable = [r for r in result.routes if is_usable(r.answer)]
    assert result.answer == next(r.answer for r in result.routes if r.name == result.chosen_route)
    if len(usable) == 1:
        assert result.chosen_route == usable[0].name and result.selection_reason == "only usable answer"
        assert all(r.uncertainty is None for r in result.routes)  # no U was needed
    else:
        assert result.selection_reason == "lower uncertainty"
        assert all(r.uncertainty is not None for r in result.routes)


def test_the_rationale_route_without_steps_gives_no_answer(writer, selector):
    result = SeaKRResult(QUESTION, "multihop", loop_answer="wellington")
    writer.finish(result, [], selector)
    assert result.routes[0].name == "rationale" and result.routes[0].answer is None
    assert result.answer == "wellington"  # no route answered: the loop's answer


def test_the_appended_rationale_scores_the_mean_step_uncertainty(writer, selector):
    appended = FinalAnswer(writer.prompt, writer.greedy, "append", step_tokens=8, answer_tokens=24)
    steps = [
        Step(0, text="The kiwi is the national bird of New Zealand.", uncertainty=-2.0),
        Step(
            1, text="The capital of New Zealand is Wellington.", chosen="p1", chosen_uncertainty=-4.0, uncertainty=9.0
        ),
        Step(2, text="", uncertainty=100.0),  # no text: not counted
    ]
    result = SeaKRResult(QUESTION, "multihop", steps=steps)
    appended.finish(result, [], selector)
    rationale = result.routes[0]
    assert rationale.name == "rationale" and rationale.uncertainty == pytest.approx(-3.0)
    undefined = SeaKRResult(QUESTION, "multihop", steps=[Step(0, text="x.", uncertainty=math.nan)])
    appended.finish(undefined, [], selector)
    assert undefined.routes[0].uncertainty is None or math.isnan(undefined.routes[0].uncertainty)
