import pytest
from langchain_core.messages import AIMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.prompts import ChatPromptTemplate

from langchain_adaptive_gates.messages import conversation_of, from_core_messages, to_core_messages

KEYS = {"question_key": "question", "history_key": "chat_history"}


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


def test_dict_takes_question_key_and_history():
    value = {"input": "When did he die?", "history": [("human", "Who wrote Hamlet?"), ("ai", "Shakespeare")]}
    question, history = conversation_of(value, question_key="input", history_key="history")
    assert question == "When did he die?" and len(history) == 2


def test_dict_without_the_key_names_it():
    with pytest.raises(ValueError, match="'question'"):
        conversation_of({"query": "x"}, **KEYS)


def test_core_turns_round_trip_and_tool_messages_are_refused():
    messages = [SystemMessage("s"), HumanMessage("u"), AIMessage("a")]
    turns = to_core_messages(messages)
    assert [t["role"] for t in turns] == ["system", "user", "assistant"]
    assert [m.type for m in from_core_messages(turns)] == ["system", "human", "ai"]
    with pytest.raises(ValueError, match="message 1 is a 'tool' message"):
        to_core_messages([HumanMessage("u"), ToolMessage("r", tool_call_id="1")])
