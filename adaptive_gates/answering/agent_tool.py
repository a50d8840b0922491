"""What an agent's gated retrieval tool answers when its gate says the model knows.

The frameworks' gated retrieval tools (LangChain's ``create_gated_retriever_tool``,
LlamaIndex's ``GatedRetrieverTool``) ask the gate before they retrieve. When it says
the model can answer from its own knowledge, the tool answers with this text instead
of passages, so the agent goes on to answer and does not call the tool again for the
same question; the decision itself travels beside the text (the tool's artifact or raw
output).
"""

from __future__ import annotations

from ..records.decision import GateDecision

#: The tool's reply when retrieval is not needed; ``{question}`` is the question asked.
NOT_NEEDED_REPLY = (
    "Retrieval is not needed for {question}: you are judged to know the answer. "
    "Answer it from your own knowledge, without calling this tool again for it."
)


def not_needed_reply(decision: GateDecision, question: str) -> str:
    """The tool's text for a ``decision`` not to retrieve for ``question``."""
    if decision.retrieve:
        raise ValueError("the decision is to retrieve: the tool answers with the passages")
    return NOT_NEEDED_REPLY.format(question=repr(question))
