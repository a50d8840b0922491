"""A chat request read for the gate: the last user turn and what comes before it."""

from __future__ import annotations

import pytest

from adaptive_gates.serve.conversation import Turn, read_turn


def test_a_follow_up_is_judged_after_the_question_it_leans_on():
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who wrote Hamlet?"},
        {"role": "assistant", "content": "William Shakespeare."},
        {"role": "user", "content": "  and when did he die?  "},
    ]
    turn = read_turn(messages, window=2)
    assert turn == Turn("and when did he die?", messages[:3], "Who wrote Hamlet? and when did he die?")
    assert read_turn(messages, window=0).judged == "and when did he die?"


def test_a_standalone_question_is_judged_alone():
    question = "What is the capital of France?"
    messages = [{"role": "user", "content": "Who wrote Hamlet?"}, {"role": "user", "content": question}]
    turn = read_turn(messages, window=3)
    assert turn == Turn(question, messages[:1], question)


def test_requests_without_a_user_question_are_refused():
    with pytest.raises(ValueError, match=r"at least one message"):
        read_turn([], window=2)
    with pytest.raises(ValueError, match=r"last message must be the user's, got role 'assistant'"):
        read_turn([{"role": "user", "content": "q?"}, {"role": "assistant", "content": "a"}], window=2)
    with pytest.raises(ValueError, match=r"the last user message is no question"):
        read_turn([{"role": "user", "content": " \n\t "}], window=2)
    with pytest.raises(ValueError, match=r"the last user message is no question"):
        read_turn([{"role": "user", "content": "\u200b"}], window=2)
