"""A gated retrieval tool in a real LangGraph agent loop: ``create_react_agent`` over
``ChatOpenAI`` talking to the core suite's OpenAI-compatible server, scripted to call
the tool it is offered (``Fault.CALLS_TOOLS``) and then answer with the embedded
SmolLM2 from the tool's reply. The gate (SKR-kNN over the hand-labelled memory) says
"not needed" for a question the model knows and retrieves for one it does not; the
tool's decision is in the agent's custom stream."""

import pytest
from langchain_core.messages import ToolMessage
from langchain_openai import ChatOpenAI
from langgraph.prebuilt import create_react_agent

from adaptive_gates.answering.agent_tool import not_needed_reply
from langchain_adaptive_gates import (
    ARTIFACT_DECISION_KEY,
    ARTIFACT_DOCUMENTS_KEY,
    DECISION_EVENT,
    create_gated_retriever_tool,
)
from support.openai_server import Fault

pytestmark = [
    pytest.mark.usefixtures("one_torch_thread"),
    # langchain's create_agent, its successor, needs a newer langchain-core than the one installed
    pytest.mark.filterwarnings("ignore:create_react_agent has been moved"),
]


@pytest.fixture
def agent(openai_server, knn_gate, passage_store):
    openai_server.set_fault(Fault.CALLS_TOOLS)
    tool = create_gated_retriever_tool(
        passage_store("in-memory").as_retriever(search_kwargs={"k": 2}),
        knn_gate,
        "search_wikipedia",
        "Look up passages of Wikipedia that answer a question.",
    )
    model = ChatOpenAI(
        base_url=openai_server.base_url, api_key="x", model=openai_server.model_id, max_tokens=8, max_retries=0
    )
    return create_react_agent(model, [tool])


def _tool_message(state) -> ToolMessage:
    (message,) = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return message


@pytest.mark.parametrize("path", ["invoke", "ainvoke"])
async def test_the_agent_is_told_retrieval_is_not_needed_for_what_the_model_knows(agent, path):
    question = "Who wrote Hamlet?"
    ask = {"messages": [("user", question)]}
    state = agent.invoke(ask) if path == "invoke" else await agent.ainvoke(ask)
    message = _tool_message(state)
    decision = message.artifact[ARTIFACT_DECISION_KEY]
    assert decision["retrieve"] is False and decision["question"] == question
    assert message.content.startswith("Retrieval is not needed") and message.artifact[ARTIFACT_DOCUMENTS_KEY] == []
    assert state["messages"][-1].type == "ai" and state["messages"][-1].content  # the model answered


async def test_the_agent_gets_passages_for_what_the_model_does_not_know(agent, boolq):
    question = "What was the population of Tuvalu in the 2021 census?"
    state = await agent.ainvoke({"messages": [("user", question)]})
    message = _tool_message(state)
    documents = message.artifact[ARTIFACT_DOCUMENTS_KEY]
    assert message.artifact[ARTIFACT_DECISION_KEY]["retrieve"] is True and len(documents) == 2
    assert message.content == "\n\n".join(d.page_content for d in documents)
    assert {d.page_content for d in documents} <= {r["passage"] for r in boolq}


@pytest.mark.parametrize("path", ["stream", "astream"])
async def test_the_tools_decision_is_in_the_agents_custom_stream(agent, path):
    """As the gate node's is: ``stream_mode="custom"`` carries ``{DECISION_EVENT: decision}``,
    the decision the tool message's artifact holds, before the agent's answer."""
    ask = {"messages": [("user", "Who wrote Hamlet?")]}
    modes = ["custom", "values"]
    if path == "stream":
        chunks = list(agent.stream(ask, stream_mode=modes))
    else:
        chunks = [chunk async for chunk in agent.astream(ask, stream_mode=modes)]
    custom = [(i, chunk) for i, (mode, chunk) in enumerate(chunks) if mode == "custom"]
    [(at, written)] = custom
    state = chunks[-1][1]
    assert written == {DECISION_EVENT: _tool_message(state).artifact[ARTIFACT_DECISION_KEY]}
    assert written[DECISION_EVENT]["retrieve"] is False
    answer = state["messages"][-1]
    assert answer.type == "ai" and not answer.tool_calls and at < len(chunks) - 1  # written before the answer


def test_the_tool_outside_a_graph_writes_nowhere_and_answers(knn_gate, passage_store):
    tool = create_gated_retriever_tool(
        passage_store("in-memory").as_retriever(search_kwargs={"k": 2}), knn_gate, "search", "Look up passages."
    )
    message = tool.invoke({"type": "tool_call", "id": "1", "name": "search", "args": {"query": "Who wrote Hamlet?"}})
    assert message.artifact[ARTIFACT_DECISION_KEY]["retrieve"] is False


def test_the_not_needed_reply_is_the_cores(knn_gate):
    decision = knn_gate.decide("Who wrote Hamlet?")
    assert not decision.retrieve
    assert not_needed_reply(decision, "Who wrote Hamlet?").startswith("Retrieval is not needed for 'Who wrote Hamlet?'")
    with pytest.raises(ValueError, match="the decision is to retrieve"):
        not_needed_reply(knn_gate.decide("When was he born?"), "When was he born?")
