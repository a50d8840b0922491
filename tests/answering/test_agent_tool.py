"""The agent tool's reply when its gate says the model knows the answer."""

from __future__ import annotations

import pytest

from adaptive_gates import PopularityGate
from adaptive_gates.answering.agent_tool import NOT_NEEDED_REPLY, not_needed_reply

KNOWN = "What is the capital of France?"
RARE = "Who was the second wife of Takamiyama Daigoro?"


@pytest.fixture(scope="module")
def gate():
    return PopularityGate()


def test_a_decision_not_to_retrieve_gives_the_reply_naming_the_question(gate):
    decision = gate.decide(KNOWN)
    assert not decision.retrieve
    reply = not_needed_reply(decision, KNOWN)
    assert reply == NOT_NEEDED_REPLY.format(question=repr(KNOWN))
    assert reply.startswith("Retrieval is not needed for 'What is the capital of France?': ")
    assert "without calling this tool again" in reply


def test_a_decision_to_retrieve_is_refused(gate):
    decision = gate.decide(RARE)
    assert decision.retrieve
    with pytest.raises(ValueError, match="the decision is to retrieve"):
        not_needed_reply(decision, RARE)


def test_the_question_is_quoted_as_a_literal(gate):
    question = 'Is {this} the capital of "France"?\nAnswer: yes'
    reply = not_needed_reply(gate.decide(KNOWN), question)
    assert repr(question) in reply
    assert "\n" not in reply  # the question's line break stays escaped: one line of text
