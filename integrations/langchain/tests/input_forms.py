"""Every form of input the package's runnables read a question from, and values that
are none of them: what their input schemas must accept and refuse."""

from __future__ import annotations

from typing import Any

from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.prompt_values import ChatPromptValue, StringPromptValue


def question_forms(question: str) -> dict[str, Any]:
    """``question`` in each form ``invoke`` accepts, by name."""
    return {
        "string": question,
        "messages": [AIMessage("Hello."), HumanMessage(question)],
        "dict": {"question": question, "chat_history": [HumanMessage("Hi"), AIMessage("Hello.")]},
        "input-dict": {"input": question},
        "openai-dicts": [{"role": "assistant", "content": "Hello."}, {"role": "user", "content": question}],
        "message": HumanMessage(question),
        "string-prompt-value": StringPromptValue(text=question),
        "chat-prompt-value": ChatPromptValue(messages=[HumanMessage(question)]),
        "tuples": [("human", question)],
        "json-messages": [{"type": "human", "content": question}],
    }


#: Values in none of those forms: each input schema refuses them with a ValidationError.
NOT_INPUTS = {
    "number": 42,
    "dict-without-question": {"query": "Who?"},
    "list-of-numbers": [42],
    "untyped-object": [object()],
    "unknown-message-type": [{"type": "narrator", "content": "x"}],
    "history-not-messages": {"question": "Who?", "chat_history": 3},
}
