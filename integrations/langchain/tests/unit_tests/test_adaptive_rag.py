"""The prebuilt adaptive-RAG graph, compiled by LangGraph and run on real BoolQ passages
with the embedded SmolLM2 answering and a real SKR-kNN or log-prob gate deciding."""

import asyncio

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessageChunk, HumanMessage
from langgraph.checkpoint.memory import InMemorySaver

from adaptive_gates import LogprobGate
from langchain_adaptive_gates import (
    DECISION_EVENT,
    GRADE_ERROR_KEY,
    AdaptiveGatesChatModel,
    AdaptiveGatesEmbeddings,
    LangChainChatModel,
    create_adaptive_rag_graph,
)

from ..stores import faiss_store

KNOWN_Q = "Who wrote Macbeth?"
ALWAYS = {"configurable": {"gate_retrieval": "always"}}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Seen(BaseCallbackHandler):
    """The prompts the chat models were sent (by graph node) and the decisions dispatched."""

    def __init__(self):
        self.prompts = []
        self.decisions = []

    def on_chat_model_start(self, serialized, messages, *, metadata=None, **kwargs):
        node = (metadata or {}).get("langgraph_node")
        self.prompts.extend((node, m.text) for batch in messages for m in batch)

    def on_custom_event(self, name, data, **kwargs):
        if name == DECISION_EVENT:
            self.decisions.append(data)

    def sent(self, node):
        return "\n".join(text for n, text in self.prompts if n == node)


@pytest.fixture(scope="module")
def llm():
    """The embedded SmolLM2, short replies: an answer's words are not what is checked, and
    a grader's verdict is its first word."""
    return AdaptiveGatesChatModel(max_tokens=6)


@pytest.fixture
def question(brief_boolq):
    return brief_boolq[0]["question"] + "?"


def test_a_forced_retrieval_answers_from_the_passages_and_a_known_question_directly(
    brief_passage_store, knn_gate, llm, brief_boolq, question
):
    retriever = brief_passage_store("in-memory").as_retriever(search_kwargs={"k": 2})
    app = create_adaptive_rag_graph(knn_gate, retriever, llm)
    seen = _Seen()
    state = app.invoke({"question": question}, {**ALWAYS, "callbacks": [seen]})
    assert state["gate_decision"]["retrieve"] is True and state["gate_decision"]["details"] == {"forced": "always"}
    assert [d.page_content for d in state["documents"]] == [
        d.page_content for d in retriever.invoke(question)
    ] and state["documents"][0].page_content == brief_boolq[0]["passage"]
    assert brief_boolq[0]["passage"][:60] in seen.sent("answer") and question in seen.sent("answer")
    assert type(state["answer"]) is str and state["answer"].strip()
    assert state["messages"] == []  # asked as a question, not in a conversation
    assert [d["question"] for d in seen.decisions] == [question]

    seen = _Seen()
    direct = app.invoke({"question": KNOWN_Q}, {"callbacks": [seen]})
    assert direct["gate_decision"]["retrieve"] is False and direct["documents"] == []
    assert direct["answer"].strip() and KNOWN_Q in seen.sent("answer") and "Context" not in seen.sent("answer")


def test_it_streams_updates_and_the_answers_tokens_sync_and_async(brief_passage_store, knn_gate, llm, question):
    app = create_adaptive_rag_graph(
        knn_gate, brief_passage_store("in-memory").as_retriever(search_kwargs={"k": 1}), llm
    )
    updates = list(app.stream({"question": KNOWN_Q}, stream_mode="updates"))
    assert [next(iter(u)) for u in updates] == ["gate", "answer"]

    async def both_modes():
        return [item async for item in app.astream({"question": question}, ALWAYS, stream_mode=["updates", "messages"])]

    items = asyncio.run(both_modes())
    nodes = [next(iter(payload)) for mode, payload in items if mode == "updates"]
    assert nodes == ["gate", "retrieve", "answer"]
    tokens = [
        chunk
        for mode, (chunk, meta) in (i for i in items if i[0] == "messages")
        if meta["langgraph_node"] == "answer" and isinstance(chunk, AIMessageChunk)
    ]
    answer = next(payload["answer"]["answer"] for mode, payload in items if mode == "updates" and "answer" in payload)
    # as many chunks as the model streams (the embedded one sends its reply whole today)
    assert tokens and "".join(t.text for t in tokens) == answer


def test_a_confident_gates_draft_is_the_answer_without_a_second_llm_call(brief_passage_store):
    calls = []

    class _Calls(BaseCallbackHandler):
        def on_chat_model_start(self, serialized, messages, **kwargs):
            calls.append(messages)

    llm = AdaptiveGatesChatModel(max_tokens=24, callbacks=[_Calls()])
    app = create_adaptive_rag_graph(
        LogprobGate(LangChainChatModel(llm)), brief_passage_store("in-memory").as_retriever(), llm
    )
    state = asyncio.run(app.ainvoke({"question": "What is the capital of Japan?"}))
    assert state["gate_decision"]["retrieve"] is False and "Tokyo" in state["gate_decision"]["draft_answer"]
    assert state["answer"] == state["gate_decision"]["draft_answer"] and len(calls) == 1


def test_a_function_grader_keeps_the_relevant_documents_and_those_it_failed_on(
    brief_passage_store, knn_gate, llm, brief_boolq
):
    question = brief_boolq[0]["question"] + "?"
    retriever = brief_passage_store("in-memory").as_retriever(search_kwargs={"k": 3})
    retrieved = retriever.invoke(question)
    failing = retrieved[2].page_content

    def on_topic(q, document):
        assert q == question
        if document.page_content == failing:
            raise RuntimeError("grading service down")
        return document.metadata["title"] == brief_boolq[0]["title"]

    app = create_adaptive_rag_graph(knn_gate, retriever, llm, grade_documents=on_topic)
    state = app.invoke({"question": question}, ALWAYS)
    expected = [
        d.page_content for d in retrieved if d.metadata["title"] == brief_boolq[0]["title"] or d.page_content == failing
    ]
    assert [d.page_content for d in state["documents"]] == expected and len(expected) < 3
    assert state["documents"][-1].metadata[GRADE_ERROR_KEY] == "RuntimeError: grading service down"
    assert all(GRADE_ERROR_KEY not in d.metadata for d in state["documents"][:-1])


def test_the_embedded_model_grades_each_document(brief_passage_store, knn_gate, llm, question):
    retriever = brief_passage_store("in-memory").as_retriever(search_kwargs={"k": 2})
    app = create_adaptive_rag_graph(knn_gate, retriever, llm, grade_documents=llm)
    replies = _Replies()
    state = asyncio.run(app.ainvoke({"question": question}, {**ALWAYS, "callbacks": [replies]}))
    retrieved = [d.page_content for d in retriever.invoke(question)]
    verdicts = {}
    for prompt, reply in replies.by_prompt.items():
        document = next(d for d in retrieved if f"Document: {d}\n" in prompt)
        first = reply.strip().lower().split()[:1]
        verdicts[document] = first[0].strip(".,!") if first else ""
    assert sorted(verdicts) == sorted(retrieved)  # each document graded once
    # kept: a yes, or a reply that is neither yes nor no (recorded); dropped: a no
    assert [d.page_content for d in state["documents"]] == [d for d in retrieved if verdicts[d] != "no"]
    for d in state["documents"]:
        assert (GRADE_ERROR_KEY in d.metadata) == (verdicts[d.page_content] != "yes")


class _Replies(BaseCallbackHandler):
    """Each grading prompt's reply."""

    def __init__(self):
        self.prompts = {}
        self.by_prompt = {}

    def on_chat_model_start(self, serialized, messages, *, run_id, metadata=None, **kwargs):
        if (metadata or {}).get("langgraph_node") == "grade":
            self.prompts[run_id] = "\n".join(m.text for m in messages[0])

    def on_llm_end(self, response, *, run_id, **kwargs):
        if run_id in self.prompts:
            self.by_prompt[self.prompts[run_id]] = response.generations[0][0].text


def test_a_failing_retriever_is_recorded_and_the_question_answered_directly(core_embedder, knn_gate, llm, question):
    # a real store whose index was built for 8-d vectors: faiss refuses the 384-d query
    store = faiss_store(AdaptiveGatesEmbeddings(core_embedder), 8)
    app = create_adaptive_rag_graph(knn_gate, store.as_retriever(), llm)
    seen = _Seen()
    state = app.invoke({"question": question}, {**ALWAYS, "callbacks": [seen]})
    assert state["retrieval_error"].startswith("AssertionError") and state["documents"] == []
    assert state["answer"].strip() and "Context" not in seen.sent("answer")


def test_a_conversation_with_memory_keeps_its_turns_and_starts_each_turn_clean(
    brief_passage_store, knn_gate, llm, question
):
    app = create_adaptive_rag_graph(
        knn_gate,
        brief_passage_store("in-memory").as_retriever(search_kwargs={"k": 1}),
        llm,
        checkpointer=InMemorySaver(),
    )
    first = app.invoke(
        {"messages": [HumanMessage(question)]}, {"configurable": {"thread_id": "t1", "gate_retrieval": "always"}}
    )
    assert len(first["documents"]) == 1 and [m.type for m in first["messages"]] == ["human", "ai"]
    assert first["messages"][-1].text == first["answer"]
    seen = _Seen()
    second = app.invoke(
        {"messages": [HumanMessage(KNOWN_Q)]}, {"configurable": {"thread_id": "t1"}, "callbacks": [seen]}
    )
    assert [m.type for m in second["messages"]] == ["human", "ai", "human", "ai"]
    assert second["question"] == KNOWN_Q and second["gate_decision"]["retrieve"] is False
    assert second["documents"] == [] and second["retrieval_error"] is None
    assert question in seen.sent("answer")  # the earlier turns are the answer's chat history


def test_bad_input_and_prompts_get_clear_errors(brief_passage_store, knn_gate, llm):
    from langchain_core.prompts import ChatPromptTemplate

    retriever = brief_passage_store("in-memory").as_retriever()
    with pytest.raises(ValueError, match=r"\['context'\]"):
        create_adaptive_rag_graph(knn_gate, retriever, llm, prompt=ChatPromptTemplate.from_template("{question}"))
    with pytest.raises(TypeError, match=r"InMemoryVectorStore \(a vector store gives one with .as_retriever\(\)\)"):
        create_adaptive_rag_graph(knn_gate, brief_passage_store("in-memory"), llm)
    with pytest.raises(TypeError, match="grade_documents"):
        create_adaptive_rag_graph(knn_gate, retriever, llm, grade_documents="yes")
    app = create_adaptive_rag_graph(knn_gate, retriever, llm)
    with pytest.raises(ValueError, match="'messages' ending with a human turn, an 'input' or a 'question'"):
        app.invoke({"documents": []})


def test_a_graders_reply_is_read_by_its_first_word(llm):
    from langchain_core.messages import AIMessage
    from langchain_core.prompts import ChatPromptTemplate

    from langchain_adaptive_gates.grading import document_grader, parse_grade

    assert parse_grade("Yes, it does.") is True and parse_grade(" no.") is False
    assert parse_grade(AIMessage("YES")) is True and parse_grade(False) is False
    with pytest.raises(ValueError, match="neither yes nor no: 'maybe'"):
        parse_grade("maybe")
    with pytest.raises(TypeError, match="bool or yes/no text"):
        parse_grade(3)
    with pytest.raises(ValueError, match=r"\['document'\]"):
        document_grader(llm, ChatPromptTemplate.from_template("{question}"))


def test_without_langgraph_the_graph_names_the_extra_and_the_package_still_imports(monkeypatch):
    import subprocess
    import sys

    import langchain_adaptive_gates

    code = "import sys, langchain_adaptive_gates; print('langgraph' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"
    monkeypatch.setitem(sys.modules, "langgraph.graph", None)  # as if langgraph were not installed
    monkeypatch.delitem(sys.modules, "langchain_adaptive_gates.adaptive_rag")
    monkeypatch.delattr(langchain_adaptive_gates, "adaptive_rag")
    with pytest.raises(ImportError, match=r"pip install 'langchain-adaptive-gates\[langgraph\]'"):
        langchain_adaptive_gates.create_adaptive_rag_graph  # noqa: B018


def test_a_turns_input_is_its_question_and_the_run_context_controls_the_gate(
    brief_passage_store, knn_gate, llm, question
):
    app = create_adaptive_rag_graph(
        knn_gate,
        brief_passage_store("in-memory").as_retriever(search_kwargs={"k": 1}),
        llm,
        checkpointer=InMemorySaver(),
    )
    thread = {"configurable": {"thread_id": "by-input"}}
    first = app.invoke({"input": question}, thread, context={"gate_retrieval": "always"})
    assert first["question"] == question and first["gate_decision"]["details"] == {"forced": "always"}
    assert len(first["documents"]) == 1 and "input" not in first
    # the next turn's question is not shadowed by the last turn's input, nor its input by the last question
    assert app.invoke({"question": KNOWN_Q}, thread)["gate_decision"]["question"] == KNOWN_Q
    third = app.invoke({"input": question}, thread, context={"gate_retrieval": "never"})
    assert third["question"] == question and third["gate_decision"]["retrieve"] is False and third["documents"] == []


def test_the_decision_streams_in_custom_mode_beside_the_answers_tokens(brief_passage_store, knn_gate, llm):
    app = create_adaptive_rag_graph(knn_gate, brief_passage_store("in-memory").as_retriever(), llm)
    items = list(app.stream({"question": KNOWN_Q}, stream_mode=["custom", "messages"]))
    custom = [payload for mode, payload in items if mode == "custom"]
    assert len(custom) == 1 and custom[0][DECISION_EVENT]["question"] == KNOWN_Q
    assert custom[0][DECISION_EVENT]["retrieve"] is False and any(mode == "messages" for mode, _ in items)
