"""Every runnable the package exports, and the adaptive-RAG graph, built from real parts,
describes itself: input, output and config JSON schemas, an input schema that validates
every form of input the runnable reads, and a pydantic ValidationError (never another
exception) for a value in no such form. This is what LangGraph's server and LangServe
read before anything else."""

from __future__ import annotations

import inspect
from typing import Any

import pytest
from langchain_core.messages import AIMessage, HumanMessage
from langchain_core.runnables import Runnable
from pydantic import ValidationError

import langchain_adaptive_gates as package
from adaptive_gates import AnswerCandidate
from langchain_adaptive_gates import (
    AdaptiveGatesChatModel,
    AnswerSelector,
    GatedRetriever,
    GatePassagesRetriever,
    GateRunnable,
    SavedGateRunnable,
    SeaKRChain,
    condense_question_chain,
    create_adaptive_rag_graph,
    document_grader,
    gate_node,
    gated_router,
)

from ..input_forms import NOT_INPUTS, question_forms

Q = "Who wrote Macbeth?"
#: The forms a chat model reads (LangChain's LanguageModelInput): no dict, no bare message.
MODEL_FORMS = ["string", "messages", "openai-dicts", "string-prompt-value", "chat-prompt-value", "tuples"]


def _pick(*names: str) -> list[Any]:
    forms = question_forms(Q)
    return [forms[n] for n in names]


def _conversations() -> list[Any]:
    """``messages`` of a graph's input in each form LangChain reads as a message list."""
    forms = question_forms(Q)
    return [{"messages": forms[n]} for n in ("messages", "openai-dicts", "tuples", "json-messages")]


#: name -> (build(parts), the inputs it reads, values in no form it reads)
CASES: dict[str, tuple[Any, list[Any], list[Any]]] = {
    "GateRunnable": (lambda p: GateRunnable(p["gate"]), list(question_forms(Q).values()), list(NOT_INPUTS.values())),
    "SavedGateRunnable": (
        lambda p: SavedGateRunnable(p["saved"]),
        list(question_forms(Q).values()),
        list(NOT_INPUTS.values()),
    ),
    "GatedRouter": (
        lambda p: gated_router(p["gate"], direct=p["llm"], retrieval=p["llm"]),
        _pick(*MODEL_FORMS),
        [42, {"question": Q}, [object()]],
    ),
    "gated_router": (
        lambda p: gated_router(p["gate"], direct=p["retriever"], retrieval=p["retriever"]),
        [Q],
        [42, [HumanMessage(Q)]],
    ),
    "AdaptiveGatesChatModel": (lambda p: p["llm"], _pick(*MODEL_FORMS), [42, {"question": Q}, [42], [object()]]),
    "GatedRetriever": (lambda p: GatedRetriever(retriever=p["retriever"], gate=p["gate"]), [Q], [42, {"q": Q}]),
    "GatePassagesRetriever": (lambda p: GatePassagesRetriever(retriever=p["retriever"]), [Q], [42, [Q]]),
    "SeaKRChain": (lambda p: SeaKRChain(p["retriever"]), [Q, {"question": Q}, {"input": Q}], [42, {"query": Q}]),
    "AnswerSelector": (
        lambda p: AnswerSelector(),
        [[AnswerCandidate("Shakespeare", prompt="Q"), {"answer": None, "uncertainty": 0.5, "name": "knowledge"}]],
        [[3], [{"answer": "x", "score": 1}], "x"],
    ),
    "condense_question_chain": (
        lambda p: condense_question_chain(p["llm"]),
        [
            {"chat_history": history, "question": "And when did he die?"}
            for history in ([HumanMessage(Q), AIMessage("Shakespeare.")], [("human", Q), ("ai", "Shakespeare.")])
        ],
        [42, {"question": Q}, {"chat_history": [42], "question": Q}],
    ),
    "document_grader": (lambda p: document_grader(p["llm"]), [{"question": Q, "document": "Macbeth"}], [42, {}]),
    "gate_node": (lambda p: gate_node(p["gate"]), [{"question": Q}, {"input": Q}, {"messages": [("human", Q)]}], [42]),
    "create_adaptive_rag_graph": (
        lambda p: create_adaptive_rag_graph(p["gate"], p["retriever"], p["llm"]),
        [{"question": Q}, {"input": Q}, *_conversations()],
        [42, {"question": 42}, {"messages": [42]}, {"messages": [object()]}],
    ),
}


def _exported_runnables() -> set[str]:
    """The names in ``__all__`` that are runnable classes or functions returning one."""
    names = set()
    for name in package.__all__:
        value = getattr(package, name)
        if inspect.isclass(value):
            if issubclass(value, Runnable):
                names.add(name)
        elif callable(value):
            returns = str(inspect.signature(value).return_annotation)
            if any(kind in returns for kind in ("Runnable", "Graph", "GatedRouter")):
                names.add(name)
    return names


@pytest.fixture(scope="module")
def parts(knn_gate, passage_store, tmp_path_factory):
    # the chat model loads its weights on first use: building and describing need none
    return {
        "gate": knn_gate,
        "saved": knn_gate.save(tmp_path_factory.mktemp("schemas") / "gate"),
        "retriever": passage_store("in-memory").as_retriever(search_kwargs={"k": 1}),
        "llm": AdaptiveGatesChatModel(max_tokens=4),
    }


def test_every_exported_runnable_has_a_case():
    assert _exported_runnables() == set(CASES)


@pytest.mark.parametrize("name", list(CASES))
def test_the_schemas_describe_and_validate_what_it_reads(parts, name):
    build, accepted, refused = CASES[name]
    runnable = build(parts)
    for schema in (runnable.get_input_jsonschema(), runnable.get_output_jsonschema(), runnable.get_config_jsonschema()):
        assert isinstance(schema, dict) and schema.get("title")
    model = runnable.get_input_schema()
    for value in accepted:
        model.model_validate(value)
    for value in refused:
        with pytest.raises(ValidationError):
            model.model_validate(value)


def test_the_gates_control_keys_are_in_the_config_schemas(parts):
    for name in ("GateRunnable", "GatedRouter", "GatedRetriever", "gate_node"):
        configurable = CASES[name][0](parts).get_config_jsonschema()["$defs"]["Configurable"]["properties"]
        assert {"gate_threshold", "gate_retrieval", "gate_name", "gate_target_rate"} <= set(configurable), name
    graph = CASES["create_adaptive_rag_graph"][0](parts)
    assert set(graph.get_context_jsonschema()["properties"]) == {
        "gate_threshold",
        "gate_retrieval",
        "gate_name",
        "gate_target_rate",
    }
    output = graph.get_output_jsonschema()["properties"]
    assert {"question", "gate_decision", "documents", "answer", "messages"} <= set(output)
