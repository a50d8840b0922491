"""``GatedRetrieverTool``: LlamaIndex's ``RetrieverTool`` with a gate in front.

An agent that calls its retrieval tool on every turn pays for a retrieval each time,
and may get passages that turn a right answer wrong. This tool asks the gate first
(through a ``GatedRetriever``): when it says the model knows, the tool's content says
retrieval is not needed (``adaptive_gates.answering.agent_tool``) instead of giving passages.
Either way its ``ToolOutput.raw_output`` is the ``GatedNodes`` (the nodes, none when
not retrieved, and the ``GateDecision``), so an agent's tool-call events carry the
decision.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.base_retriever import BaseRetriever
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.schema import MetadataMode, QueryBundle
from llama_index.core.tools.retriever_tool import RetrieverTool
from llama_index.core.tools.types import ToolMetadata, ToolOutput
from llama_index.retrievers.adaptive_gates import GatedNodes, GatedRetriever

from adaptive_gates import Gate
from adaptive_gates.extend import not_needed_reply

DEFAULT_NAME = "gated_retriever"
DEFAULT_DESCRIPTION = (
    "Look up passages of a knowledge base that answer a question; it says when the "
    "question needs no lookup and can be answered from what you know."
)


class GatedRetrieverTool(RetrieverTool):
    """A ``RetrieverTool`` whose retriever is a ``GatedRetriever``: it retrieves only
    when the gate says the model needs it. Called with the agent's ``input`` argument
    (LlamaIndex's default tool schema), or a single positional query."""

    def __init__(
        self,
        retriever: GatedRetriever,
        metadata: ToolMetadata,
        node_postprocessors: list[BaseNodePostprocessor] | None = None,
    ) -> None:
        if not isinstance(retriever, GatedRetriever):
            raise TypeError(f"retriever must be a GatedRetriever, got {type(retriever).__name__}")
        super().__init__(retriever, metadata, node_postprocessors)

    @classmethod
    def from_defaults(  # type: ignore[override]  # a gate first, as the tool is about it
        cls,
        gate: Gate,
        retriever: BaseRetriever,
        node_postprocessors: list[BaseNodePostprocessor] | None = None,
        name: str | None = None,
        description: str | None = None,
    ) -> GatedRetrieverTool:
        """The tool over ``retriever``, asked only when ``gate`` says retrieve."""
        metadata = ToolMetadata(name=name or DEFAULT_NAME, description=description or DEFAULT_DESCRIPTION)
        return cls(GatedRetriever(gate, retriever), metadata, node_postprocessors)

    @property
    def gated(self) -> GatedRetriever:
        """The gated retriever behind the tool."""
        retriever = self.retriever
        assert isinstance(retriever, GatedRetriever)  # checked in __init__
        return retriever

    def call(self, *args: Any, **kwargs: Any) -> ToolOutput:
        query = _query(args, kwargs)
        found = self.gated.retrieve_with_decision(query)
        if found.decision.retrieve:
            found = GatedNodes(self._apply_node_postprocessors(found.nodes, QueryBundle(query)), found.decision)
        return self._output(query, found)

    async def acall(self, *args: Any, **kwargs: Any) -> ToolOutput:
        query = _query(args, kwargs)
        found = await self.gated.aretrieve_with_decision(query)
        if found.decision.retrieve:
            nodes = await self._async_apply_node_postprocessors(found.nodes, QueryBundle(query))
            found = GatedNodes(nodes, found.decision)
        return self._output(query, found)

    def _output(self, query: str, found: GatedNodes) -> ToolOutput:
        if found.decision.retrieve:
            content = "\n\n".join(n.node.get_content(MetadataMode.LLM) for n in found.nodes)
        else:
            content = not_needed_reply(found.decision, query)
        return ToolOutput(
            content=content, tool_name=self.metadata.get_name(), raw_input={"input": query}, raw_output=found
        )


def _query(args: tuple[Any, ...], kwargs: dict[str, Any]) -> str:
    """The query an agent called the tool with: ``input=...`` or one positional value."""
    if "input" in kwargs and not args and len(kwargs) == 1:
        return str(kwargs["input"])
    if len(args) == 1 and not kwargs:
        return str(args[0])
    raise ValueError(f"call the tool with one query (input=...), got args {args!r} and kwargs {kwargs!r}")
