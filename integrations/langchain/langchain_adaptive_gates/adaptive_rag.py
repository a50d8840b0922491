"""A prebuilt adaptive-RAG LangGraph graph: the gate decides, then the graph retrieves
(and optionally grades the documents) before answering, answers directly, or returns
the gate's own draft answer.

Needs ``langgraph`` (the ``langgraph`` extra:
``pip install 'langchain-adaptive-gates[langgraph]'``).
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping
from typing import Annotated, Any

from langchain_core.documents import Document
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage
from langchain_core.prompts import BasePromptTemplate, ChatPromptTemplate, MessagesPlaceholder
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.base import coerce_to_runnable

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12: the
# graph's input and output schemas are built from these
from typing_extensions import TypedDict

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import DEFAULT_REFIT_EVERY, ShadowLearner, door_learner

from .gate_runnable import DECISION_EVENT, GateRunnable
from .grading import Grader, arelevant, as_grader, relevant
from .graph import STATE_DECISION_KEY, route_on_decision
from .graph_runtime import GateContext, with_run_context, write_decision
from .messages import MessageLike, split_conversation
from .passages import decision_documents, hit_documents

try:
    from langgraph.channels import EphemeralValue
    from langgraph.graph import END, START, StateGraph, add_messages
    from langgraph.graph.state import CompiledStateGraph
except ImportError as exc:  # the optional extra
    raise ImportError(
        "create_adaptive_rag_graph needs langgraph: pip install 'langchain-adaptive-gates[langgraph]'"
    ) from exc

logger = logging.getLogger(__name__)

#: Tag of a shadow answer's run (``create_adaptive_rag_graph``'s ``shadow_rate``).
SHADOW_TAG = "adaptive-gates:shadow"

#: Default prompt of the answer from documents: ``context``, ``question`` and the
#: optional ``chat_history`` (the turns before the question in a conversation).
RAG_PROMPT = ChatPromptTemplate.from_messages(
    [
        ("system", "Answer the question using the context.\n\nContext:\n{context}"),
        MessagesPlaceholder("chat_history", optional=True),
        ("human", "{question}"),
    ]
)
#: Default prompt of the direct answer: ``question`` and the optional ``chat_history``.
DIRECT_PROMPT = ChatPromptTemplate.from_messages(
    [MessagesPlaceholder("chat_history", optional=True), ("human", "{question}")]
)


class AdaptiveRAGState(TypedDict, total=False):
    """The graph's state.

    Give ``question`` (a string) or ``messages`` (a conversation ending with the human
    turn to answer; the answer is appended to it). The graph writes the rest:
    ``gate_decision`` (the ``GateDecision`` as a dict, with its ``draft_answer`` and
    the ``passages`` a draft-check gate checked), ``documents`` (retrieved, or those
    passages, after grading), ``retrieval_error`` (why retrieval
    failed, when it did: the question is then answered without documents) and
    ``answer`` (the text).
    """

    messages: Annotated[list[AnyMessage], add_messages]
    question: str
    gate_decision: dict[str, Any]
    documents: list[Document]
    retrieval_error: str | None
    answer: str


class AdaptiveRAGInput(TypedDict, total=False):
    """What a turn gives the graph: ``messages`` (a conversation ending with the human
    turn to answer, in any form LangChain reads as messages), else ``input`` (the
    question, as ``create_retrieval_chain`` names it), else ``question``. ``input``
    holds for its turn only, so with a checkpointer a later turn's ``question`` is
    not shadowed by it."""

    messages: Annotated[list[MessageLike], add_messages]
    question: str
    input: Annotated[str, EphemeralValue]


class _GateNodeState(AdaptiveRAGState, total=False):
    """What the gate node reads: the state and the turn's ``input``."""

    input: Annotated[str, EphemeralValue]


def create_adaptive_rag_graph(
    gate: Gate | GateRunnable,
    retriever: BaseRetriever | Runnable[str, list[Document]],
    llm: Runnable | Callable[..., Any],
    *,
    grade_documents: Grader | None = None,
    prompt: BasePromptTemplate = RAG_PROMPT,
    direct_prompt: BasePromptTemplate = DIRECT_PROMPT,
    checkpointer: Any = None,
    name: str = "adaptive_rag",
    shadow_rate: float | None = None,
    shadow_refit_every: int = DEFAULT_REFIT_EVERY,
    shadow_learner: ShadowLearner | None = None,
) -> CompiledStateGraph[AdaptiveRAGState, GateContext, AdaptiveRAGInput, AdaptiveRAGState]:
    """A compiled LangGraph graph over ``AdaptiveRAGState``::

        START -> gate -> retrieve -> [grade] -> answer -> END
                      -> answer (direct)               -> END
                      -> draft (the gate already answered) -> END

    A turn gives ``messages``, ``input`` or ``question`` (``AdaptiveRAGInput``).
    ``gate`` decides on the question (a ``GateRunnable`` keeps its history and
    per-request options); the config reaches it, so ``configurable`` control (e.g.
    ``{"gate_retrieval": "always"}``) and the decision's custom event work in the
    graph. The same control may come in the run's LangGraph context
    (``app.invoke(x, context={"gate_retrieval": "always"})``; ``GateContext`` is the
    graph's context schema), its keys winning over ``configurable``'s. The decision is
    also written to the custom stream (``stream_mode="custom"``) as
    ``{DECISION_EVENT: decision dict}``. ``retriever`` is any LangChain retriever (or runnable from the question to
    documents); a failing one is recorded in ``retrieval_error`` and the question is
    answered directly. A gate that retrieved to decide (a draft-check gate) hands the
    ``retrieve`` node the passages it checked (``decision_documents``: documents with
    metadata ``id``, ``title``, ``score``) and ``retriever`` is not called; a request
    forced to retrieve, or a gate that retrieves nothing to decide, asks ``retriever``.
    ``grade_documents`` (an LLM, a runnable or a function, see ``grading``) keeps only
    the documents it judges relevant. ``llm`` (a chat model or any runnable) answers
    with ``prompt`` (variables ``context``, ``question``, optional ``chat_history``)
    when there are documents, else with ``direct_prompt``; when the gate already
    answered (a confident verbalized or log-prob gate, a draft-check gate that does
    not retrieve), its draft is the answer and ``llm`` is not called.

    The graph runs with ``invoke``, ``ainvoke``, ``stream`` and ``astream``; in
    ``stream_mode="messages"`` the answer's tokens stream from the ``answer`` node
    (``metadata["langgraph_node"]``). ``checkpointer`` is passed to ``compile``.

    Shadow learning (a draft-check gate learning its LLM from the questions the graph
    answers, ``docs/shadow_learning.md``): with ``shadow_rate`` R (0 to 1) the pair of
    each decision answered over the passages it checked (its draft, the ``answer``
    node's answer) is recorded with the gate, observed with probability 1, and for a
    share R of the decisions answered without them the graph also answers over those
    passages (the ``rag`` chain: ``prompt`` and ``llm``, no grading; one extra LLM
    call, never shown to the user, traced as ``shadow_answer``), observed with
    probability R. The gate refits every ``shadow_refit_every`` pairs. All of it runs
    after the answer, in a worker thread (from ``ainvoke`` too); a failure is logged,
    never raised. ``shadow_learner`` gives the ``ShadowLearner`` to use instead (its
    counters, ``drain()``). Without either, nothing is recorded.
    """
    gate_runnable = gate if isinstance(gate, GateRunnable) else GateRunnable(gate)
    learner = door_learner(gate_runnable.gate, shadow_rate, shadow_refit_every, shadow_learner)
    if not isinstance(retriever, Runnable):
        hint = " (a vector store gives one with .as_retriever())" if hasattr(retriever, "as_retriever") else ""
        raise TypeError(f"retriever must be a LangChain retriever, got {type(retriever).__name__}{hint}")
    for template, needed in ((prompt, {"context", "question"}), (direct_prompt, {"question"})):
        missing = needed - set(template.input_variables)
        if missing:
            raise ValueError(f"the answer prompt must use the variables {sorted(missing)}")
    rag, direct = prompt | coerce_to_runnable(llm), direct_prompt | coerce_to_runnable(llm)
    nodes = _Nodes(gate_runnable, retriever, rag, direct, learner)

    graph = StateGraph(AdaptiveRAGState, context_schema=GateContext, input_schema=AdaptiveRAGInput)
    gate_node = RunnableLambda(nodes.gate, afunc=nodes.agate, name="gate")
    graph.add_node("gate", gate_node, input_schema=_GateNodeState)
    graph.add_node("retrieve", RunnableLambda(nodes.retrieve, afunc=nodes.aretrieve, name="retrieve"))
    graph.add_node("answer", RunnableLambda(nodes.answer, afunc=nodes.aanswer, name="answer"))
    graph.add_node("draft", nodes.draft)
    graph.add_edge(START, "gate")
    route = route_on_decision(retrieve="retrieve", direct="answer", draft="draft")
    graph.add_conditional_edges("gate", route, ["retrieve", "answer", "draft"])
    if grade_documents is not None:
        grader = as_grader(grade_documents)

        def grade(state: AdaptiveRAGState, config: RunnableConfig) -> dict[str, Any]:
            return {"documents": relevant(grader, state["question"], state.get("documents", []), config)}

        async def agrade(state: AdaptiveRAGState, config: RunnableConfig) -> dict[str, Any]:
            return {"documents": await arelevant(grader, state["question"], state.get("documents", []), config)}

        graph.add_node("grade", RunnableLambda(grade, afunc=agrade, name="grade"))
        graph.add_edge("retrieve", "grade")
        graph.add_edge("grade", "answer")
    else:
        graph.add_edge("retrieve", "answer")
    graph.add_edge("answer", END)
    graph.add_edge("draft", END)
    return graph.compile(checkpointer=checkpointer, name=name)


class _Nodes:
    """The graph's nodes, each with its async twin."""

    def __init__(
        self, gate: GateRunnable, retriever: Runnable, rag: Runnable, direct: Runnable, learner: ShadowLearner | None
    ) -> None:
        self.gate_runnable = gate
        self.retriever = retriever
        self.rag = rag
        self.direct = direct
        self.learner = learner

    # ---------------------------------------------------------------- gate
    def gate(self, state: _GateNodeState, config: RunnableConfig) -> dict[str, Any]:
        judged, question = _judged(state)
        return _decided(question, self.gate_runnable.invoke(judged, with_run_context(config)).to_dict())

    async def agate(self, state: _GateNodeState, config: RunnableConfig) -> dict[str, Any]:
        judged, question = _judged(state)
        return _decided(question, (await self.gate_runnable.ainvoke(judged, with_run_context(config))).to_dict())

    # ---------------------------------------------------------------- retrieve
    def retrieve(self, state: AdaptiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        checked = decision_documents(state["gate_decision"])
        if checked is not None:  # the gate retrieved to decide: no second retrieval
            return {"documents": checked}
        try:
            return {"documents": self.retriever.invoke(state["question"], config)}
        except Exception as exc:  # a failing retriever: answer without documents
            return _retrieval_failed(exc)

    async def aretrieve(self, state: AdaptiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        checked = decision_documents(state["gate_decision"])
        if checked is not None:  # as in retrieve
            return {"documents": checked}
        try:
            return {"documents": await self.retriever.ainvoke(state["question"], config)}
        except Exception as exc:  # as in retrieve
            return _retrieval_failed(exc)

    # ---------------------------------------------------------------- answer
    def answer(self, state: AdaptiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        chain, inputs = self._answer_call(state)
        return self._observed(state, _answered(state, chain.invoke(inputs, config)))

    async def aanswer(self, state: AdaptiveRAGState, config: RunnableConfig) -> dict[str, Any]:
        chain, inputs = self._answer_call(state)
        return self._observed(state, _answered(state, await chain.ainvoke(inputs, config)))

    def _answer_call(self, state: AdaptiveRAGState) -> tuple[Runnable, dict[str, Any]]:
        """The chain to answer with (from documents when there are any) and its inputs."""
        inputs: dict[str, Any] = {"question": state["question"], "chat_history": _history(state)}
        documents = state.get("documents") or []
        if not documents:
            return self.direct, inputs
        return self.rag, {**inputs, "context": "\n\n".join(d.page_content for d in documents)}

    def draft(self, state: AdaptiveRAGState) -> dict[str, Any]:
        """The confident gate's own answer, with no further LLM call."""
        return self._observed(state, _answered(state, state["gate_decision"]["draft_answer"]))

    # ---------------------------------------------------------------- shadow learning
    def _observed(self, state: AdaptiveRAGState, update: dict[str, Any]) -> dict[str, Any]:
        """``update`` (the answer), after handing the decision to the shadow learner:
        answered over the passages the gate checked when the documents are theirs."""
        if self.learner is not None:
            try:
                decision = GateDecision.from_dict(state["gate_decision"])
                retrieved = bool(state.get("documents")) and decision_documents(decision) is not None
                asked = {"question": state["question"], "chat_history": _history(state)}
            except Exception:  # nothing here may reach the user's answer
                logger.exception("shadow learning: the graph's decision could not be read")
            else:
                ask = functools.partial(self._shadow_answer, asked, decision)
                self.learner.after_answer(decision, retrieved, update["answer"], ask)
        return update

    def _shadow_answer(self, asked: dict[str, Any], decision: GateDecision) -> str:
        """The graph's answer to ``asked`` (question, chat history) over the passages
        ``decision`` checked (no grading), in a run of its own."""
        assert decision.passages is not None  # the learner asks only for a decision with passages
        documents = hit_documents(decision.passages)
        inputs = {**asked, "context": "\n\n".join(d.page_content for d in documents)}
        config: RunnableConfig = {"run_name": "shadow_answer", "tags": [SHADOW_TAG]}
        return _text(self.rag.invoke(inputs, config))


def _text(output: Any) -> str:
    """The text of an answer chain's output (a message or a string)."""
    return str(output.text) if isinstance(output, BaseMessage) else str(output)


def _in_conversation(state: Mapping[str, Any]) -> bool:
    """A turn asked in ``messages``: the conversation ends with a human turn."""
    messages = state.get("messages") or []
    return bool(messages) and messages[-1].type == "human"


def _judged(state: _GateNodeState) -> tuple[Any, str]:
    """What the gate judges (the conversation, or the question) and the question: the
    turn's ``input`` before a ``question``, which may be an earlier turn's."""
    if _in_conversation(state):
        messages = state["messages"]
        return messages, split_conversation(messages)[0]
    question = state.get("input")
    if question is None:
        if "question" not in state:
            raise ValueError("the graph's input needs 'messages' ending with a human turn, an 'input' or a 'question'")
        question = state["question"]
    return question, question


def _history(state: AdaptiveRAGState) -> list[BaseMessage]:
    """The turns before the question (none when it was asked as ``question``)."""
    return split_conversation(state["messages"])[1] if _in_conversation(state) else []


def _decided(question: str, decision: dict[str, Any]) -> dict[str, Any]:
    write_decision(DECISION_EVENT, decision)
    # A turn starts clean: with a checkpointer the last turn's documents are still held.
    return {"question": question, STATE_DECISION_KEY: decision, "documents": [], "retrieval_error": None}


def _retrieval_failed(exc: Exception) -> dict[str, Any]:
    reason = f"{type(exc).__name__}: {exc}"
    logger.warning("retrieval failed (%s); answering without documents", reason)
    return {"documents": [], "retrieval_error": reason}


def _answered(state: AdaptiveRAGState, output: Any) -> dict[str, Any]:
    """The answer's text, appended as an AI turn when the question came in ``messages``."""
    message = output if isinstance(output, BaseMessage) else AIMessage(content=str(output))
    update: dict[str, Any] = {"answer": _text(message)}
    if _in_conversation(state):
        update["messages"] = [message]
    return update
