"""The gated retrieval tool in a real LlamaIndex agent loop: ``FunctionAgent`` over
``OpenAILike`` talking to the core suite's OpenAI-compatible server, scripted to call
the tool it is offered (``Fault.CALLS_TOOLS``) and then answer with the embedded
SmolLM2 from the tool's output. The gate (SKR-kNN over the hand-labelled memory) says
"not needed" for a question the model knows and retrieves for one it does not."""

from __future__ import annotations

import pytest
from llama_index.core.agent.workflow import FunctionAgent, ToolCallResult
from llama_index.llms.openai_like import OpenAILike
from llama_index.tools.adaptive_gates import GatedRetrieverTool

from support.openai_server import Fault

from .conftest import KNOWN, UNKNOWN

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    # LlamaIndex's workflows read every attribute of an agent as it is made, pydantic's deprecated ones too
    pytest.mark.filterwarnings("ignore::DeprecationWarning:inspect"),
]


@pytest.fixture
def tool(index, knn_gate) -> GatedRetrieverTool:
    return GatedRetrieverTool.from_defaults(knn_gate, index.as_retriever(similarity_top_k=2), name="search_wikipedia")


@pytest.fixture
def agent(openai_server, tool) -> FunctionAgent:
    openai_server.set_fault(Fault.CALLS_TOOLS)
    llm = OpenAILike(
        model=openai_server.model_id,
        api_base=openai_server.base_url,
        api_key="x",
        is_chat_model=True,
        is_function_calling_model=True,
        max_tokens=8,
        max_retries=0,
    )
    return FunctionAgent(tools=[tool], llm=llm)


async def _run(agent: FunctionAgent, question: str) -> tuple[list[ToolCallResult], str]:
    handler = agent.run(user_msg=question)
    results = [event async for event in handler.stream_events() if isinstance(event, ToolCallResult)]
    response = await handler
    return results, str(response)


async def test_the_agent_is_told_retrieval_is_not_needed_for_what_the_model_knows(agent):
    results, answer = await _run(agent, KNOWN[0])
    (result,) = results
    found = result.tool_output.raw_output
    assert found.decision.retrieve is False and found.decision.question == KNOWN[0] and found.nodes == []
    assert result.tool_output.content.startswith("Retrieval is not needed") and answer


async def test_the_agent_gets_passages_for_what_the_model_does_not_know(agent, index):
    results, _ = await _run(agent, UNKNOWN[0])
    (result,) = results
    found = result.tool_output.raw_output
    plain = index.as_retriever(similarity_top_k=2).retrieve(UNKNOWN[0])
    assert found.decision.retrieve is True
    assert [n.node.node_id for n in found.nodes] == [n.node.node_id for n in plain]
    assert plain[0].node.get_content() in result.tool_output.content


def test_the_tool_is_called_with_one_query(tool):
    assert tool.call(input=KNOWN[0]).raw_output.decision.retrieve is False
    assert tool.call(UNKNOWN[0]).raw_output.decision.retrieve is True
    with pytest.raises(ValueError, match="call the tool with one query"):
        tool.call(KNOWN[0], input=KNOWN[0])
