"""The one rule every door judges a chat by: the latest question, with the earlier user
questions it leans on and nothing else (``adaptive_gates.answering.history_window``)."""

from __future__ import annotations

import pytest

from adaptive_gates.extend import refers_back, standalone_question


@pytest.mark.parametrize(
    "question",
    ["When did he die?", "And the second one?", "What about Paris?", "Why?", "Is that true?", "Who lived there?"],
)
def test_a_question_that_leans_on_an_earlier_turn_refers_back(question):
    assert refers_back(question)


@pytest.mark.parametrize(
    "question",
    ["What is the capital of France?", "Who wrote Hamlet?", "Sometimes, who wins Wimbledon?", "Andorra's capital?"],
)
def test_a_question_that_stands_alone_does_not(question):
    assert not refers_back(question)


def test_a_follow_up_reaches_back_only_as_far_as_it_leans_and_the_window_allows():
    asked = ["What is the capital of France?", "Who wrote Hamlet?", "When did he die?"]
    assert standalone_question("And where?", asked, 2) == "Who wrote Hamlet? When did he die? And where?"
    assert standalone_question("And where?", asked, 1) == "When did he die? And where?"
    assert standalone_question("And where?", asked, 0) == "And where?"
    assert standalone_question("Who painted the Mona Lisa?", asked, 2) == "Who painted the Mona Lisa?"
    assert standalone_question("  When did he die? ", ["", "  "], 2) == "When did he die?"
