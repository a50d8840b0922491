"""The embedded SmolLM2 as a LangChain chat model, and back behind a core gate."""

import pytest
from langchain_core.messages import HumanMessage, SystemMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate

from adaptive_gates import SKRPromptGate
from adaptive_gates.models import LocalChatModel
from langchain_adaptive_gates import AdaptiveGatesChatModel, LangChainChatModel
from support.event_loop import run_beside_a_ticker  # the core suite's (pythonpath in pyproject.toml)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_invoke_in_a_prompt_chain(chat_llm):
    chain = (
        ChatPromptTemplate.from_messages([("system", "Answer in one word."), ("human", "{q}")])
        | chat_llm
        | StrOutputParser()
    )
    answer = chain.invoke({"q": "What is the capital of France?"})
    assert "paris" in answer.lower()


def test_logprobs_in_openai_format(chat_llm):
    reply = chat_llm.invoke([HumanMessage("What is the capital of France?")], logprobs=True, top_logprobs=3)
    content = reply.response_metadata["logprobs"]["content"]
    assert "".join(t["token"] for t in content).strip().startswith(reply.text.strip()[:5])
    assert all(t["logprob"] <= 0 and len(t["top_logprobs"]) == 3 for t in content)
    assert "logprobs" not in chat_llm.invoke("Hi").response_metadata


def test_ainvoke_leaves_the_event_loop_free(chat_llm):
    question = [SystemMessage("Answer briefly."), HumanMessage("Who wrote Hamlet?")]
    reply, ticks = run_beside_a_ticker(chat_llm.ainvoke(question))
    assert reply.text.strip() and ticks > 1  # the loop ran other work while the model generated


def test_unknown_call_options_are_refused(chat_llm):
    with pytest.raises(TypeError, match="tools_choice"):
        chat_llm.invoke("Hi", tools_choice="auto")


def test_a_chat_model_that_is_not_the_cores_is_refused():
    with pytest.raises(TypeError, match="chat_model must implement the core's ChatModel protocol, got str"):
        AdaptiveGatesChatModel(chat_model="gpt-4o").invoke("Hi")


def test_gate_behind_both_adapters_matches_the_core_model():
    """SKR-prompt over LangChainChatModel(AdaptiveGatesChatModel()) decides as over the
    core's LocalChatModel: the replies and the graded yes/no probabilities (from token
    log-probs) cross both adapters intact."""
    # Questions SmolLM2 answers with a yes/no word: only then is P(retrieve) defined.
    questions = ["Is Paris in France?", "Who painted the Mona Lisa?"]
    core = SKRPromptGate(LocalChatModel()).decide_batch(questions)
    adapted = SKRPromptGate(LangChainChatModel(AdaptiveGatesChatModel())).decide_batch(questions)
    for a, b in zip(core, adapted):
        assert a.details["reply"] == b.details["reply"] and a.retrieve == b.retrieve
        assert a.details["p_retrieve"] is not None and b.details["p_retrieve"] is not None
        assert b.details["p_retrieve"] == pytest.approx(a.details["p_retrieve"], abs=1e-4)
    blind = SKRPromptGate(LangChainChatModel(AdaptiveGatesChatModel(), request_logprobs=False))
    assert all(d.details["p_retrieve"] is None for d in blind.decide_batch(questions))
