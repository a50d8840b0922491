import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate

from langchain_adaptive_gates.messages import (
    UnreadableInputError,
    conversation_of,
    from_core_messages,
    to_core_messages,
)

KEYS = {"input_key": "question", "history_key": "chat_history"}


def test_string_is_the_question():
    assert conversation_of("Who wrote Hamlet?", **KEYS) == ("Who wrote Hamlet?", [])


def test_message_list_splits_into_question_and_history():
    messages = [HumanMessage("Who wrote Hamlet?"), AIMessage("Shakespeare."), HumanMessage("When did he die?")]
    question, history = conversation_of(messages, **KEYS)
    assert question == "When did he die?"
    assert [m.text for m in history] == ["Who wrote Hamlet?", "Shakespeare."]


def test_tuples_and_prompt_values_are_message_lists():
    assert conversation_of([("human", "hi"), ("ai", "hello"), ("human", "Who?")], **KEYS)[0] == "Who?"
    prompt = ChatPromptTemplate.from_messages([("system", "Be brief."), ("human", "{q}")]).invoke({"q": "Why?"})
    question, history = conversation_of(prompt, **KEYS)
    assert question == "Why?" and [m.type for m in history] == ["system"]


def test_dict_takes_input_key_and_history():
    value = {"input": "When did he die?", "history": [("human", "Who wrote Hamlet?"), ("ai", "Shakespeare")]}
    question, history = conversation_of(value, input_key="input", history_key="history")
    assert question == "When did he die?" and len(history) == 2


@pytest.mark.parametrize(
    "value, says",
    [
        ({"query": "x"}, r"the input dict has no 'question' or 'input' key \(keys: \['query'\]\)"),
        ([AIMessage("Hello."), SystemMessage("Be brief.")], r"no human message .*\['ai', 'system'\]"),
        ([42], "the input list is not a message list: Unsupported message type"),
        ([("narrator", "x")], "the input list is not a message list: Unexpected message type: 'narrator'"),
        ({"question": "Who?", "chat_history": 3}, r"the input's 'chat_history' is not a message list \(got int\)"),
    ],
)
def test_an_input_without_a_question_says_what_is_wrong(value, says):
    with pytest.raises(UnreadableInputError, match=says) as raised:
        conversation_of(value, **KEYS)
    assert "\n" not in str(raised.value)  # LangChain's link to its docs is left out


@pytest.mark.parametrize(
    "value, question", [(42, 42), (None, None), ("", ""), ({"question": 42}, 42), ([HumanMessage("")], "")]
)
def test_a_bad_question_is_returned_for_the_gate_to_refuse(value, question):
    assert conversation_of(value, **KEYS) == (question, [])


def test_core_turns_round_trip_and_tool_messages_are_refused():
    messages = [SystemMessage("s"), HumanMessage("u"), AIMessage("a")]
    turns = to_core_messages(messages)
    assert [t["role"] for t in turns] == ["system", "user", "assistant"]
    assert [m.type for m in from_core_messages(turns)] == ["system", "human", "ai"]
    with pytest.raises(ValueError, match="message 1 is a 'tool' message"):
        to_core_messages([HumanMessage("u"), ToolMessage("r", tool_call_id="1")])
