"""A retrieval tool for agents that asks the gate first.

An agent that calls its retrieval tool on every turn pays for a retrieval each time,
and may get passages that turn a right answer wrong. ``create_gated_retriever_tool``
is LangChain's ``create_retriever_tool`` with a gate in front (a ``GatedRetriever``):
when the gate says the model knows, the tool answers that retrieval is not needed
(``adaptive_gates.answering.agent_tool``) instead of with passages. Either way the tool returns
content and an artifact (``response_format="content_and_artifact"``): the artifact is
``{"decision": GateDecision.to_dict(), "documents": [...]}``, so the ``ToolMessage``
an agent graph keeps carries the decision. Run inside a LangGraph graph (an agent's
tool node), the tool also writes the decision to the graph's custom stream as
``{DECISION_EVENT: decision}``, as the gate node does, so ``stream_mode="custom"``
carries it.
"""

from __future__ import annotations

from typing import Any

from langchain_core.prompts import BasePromptTemplate, PromptTemplate, format_document
from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.tools import StructuredTool
from pydantic import BaseModel, Field

from adaptive_gates import Gate
from adaptive_gates.extend import not_needed_reply

from .gate_runnable import DECISION_EVENT, GateRunnable
from .graph_runtime import write_decision
from .retrievers import GatedDocuments, GatedRetriever

#: What the tool's artifact holds, by key.
ARTIFACT_DECISION_KEY = "decision"
ARTIFACT_DOCUMENTS_KEY = "documents"


class GatedRetrieverInput(BaseModel):
    """The tool's one argument."""

    query: str = Field(description="the question to look up")


def create_gated_retriever_tool(
    retriever: Runnable,
    gate: Gate | GateRunnable,
    name: str,
    description: str,
    *,
    k: int | None = None,
    document_prompt: BasePromptTemplate | None = None,
    document_separator: str = "\n\n",
) -> StructuredTool:
    """A tool that retrieves with ``retriever`` only when ``gate`` says the model needs it.

    Args:
        retriever: any LangChain retriever (or runnable from a query to documents).
        gate: a core gate, or a configured ``GateRunnable``; the call's ``configurable``
            controls it as for the router (``gate_threshold``, ...).
        name, description: what the agent's model sees of the tool.
        k: most documents in a reply.
        document_prompt, document_separator: how documents become the reply's text,
            as for ``create_retriever_tool`` (default: each document's content).
    """
    gated = GatedRetriever(retriever=retriever, gate=GateRunnable(gate) if isinstance(gate, Gate) else gate, k=k)
    prompt = document_prompt or PromptTemplate.from_template("{page_content}")

    def reply(query: str, found: GatedDocuments) -> tuple[str, dict[str, Any]]:
        if found.decision.retrieve:
            content = document_separator.join(format_document(d, prompt) for d in found.documents)
        else:
            content = not_needed_reply(found.decision, query)
        decision = found.decision.to_dict()
        write_decision(DECISION_EVENT, decision)  # a graph's custom stream; nothing outside a graph
        return content, {ARTIFACT_DECISION_KEY: decision, ARTIFACT_DOCUMENTS_KEY: found.documents}

    def run(query: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        return reply(query, gated.retrieve(query, config))

    async def arun(query: str, config: RunnableConfig) -> tuple[str, dict[str, Any]]:
        return reply(query, await gated.aretrieve(query, config))

    return StructuredTool.from_function(
        func=run,
        coroutine=arun,
        name=name,
        description=description,
        args_schema=GatedRetrieverInput,
        response_format="content_and_artifact",
    )
