"""The router's input and output types come from its branches (real chat chains over the
embedded SmolLM2, string chains, retriever chains over the embedded MiniLM, plain
functions): its input is what every branch reads, branches that read nothing in common
are refused, its schemas build as JSON and hold its real outputs, its config schema
refuses a misspelt gate key, and the draft route answers in the branches' type."""

from operator import itemgetter

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import ConfigurableField, RunnableLambda, RunnablePassthrough
from pydantic import ValidationError

from adaptive_gates import VerbalizedGate
from langchain_adaptive_gates import (
    AdaptiveGatesChatModel,
    DisagreeingBranchesError,
    GatedRetriever,
    GatedRouter,
    GateRunnable,
    LangChainChatModel,
    gated_router,
)

from .chat_doubles import scripted

KNOWN_Q = "Who wrote Macbeth?"
FRANCE_Q = "What is the capital of France?"
PROMPT = ChatPromptTemplate.from_messages([("human", "{question}")])
RAG_PROMPT = ChatPromptTemplate.from_messages([("human", "Answer from the library. {question}")])


class _ChatCalls(BaseCallbackHandler):
    """Counts a chat model's runs."""

    def __init__(self) -> None:
        self.calls = 0

    def on_chat_model_start(self, serialized, messages, **kwargs) -> None:
        self.calls += 1


@pytest.fixture(scope="module")
def llm(one_torch_thread):
    """The embedded SmolLM2 as a LangChain chat model, three tokens an answer."""
    return AdaptiveGatesChatModel(max_tokens=3)


def _confident_gate():
    """A verbalized gate whose model is sure of its answer, so the answer is a draft."""
    return VerbalizedGate(LangChainChatModel(scripted("Paris. certain")), judge=False, top_logprobs=0)


def test_chat_chains_give_the_prompt_input_and_a_message_output(knn_gate, llm):
    router = gated_router(knn_gate, direct=PROMPT | llm, retrieval=RAG_PROMPT | llm)
    assert isinstance(router, GatedRouter)
    # Each one-variable prompt reads a dict with its variable, or a string for it.
    schema = router.get_input_jsonschema()
    assert schema["anyOf"] == [{"$ref": "#/$defs/PromptInput"}, {"type": "string"}]
    assert schema["$defs"]["PromptInput"] == PROMPT.get_input_jsonschema()
    with pytest.raises(ValidationError):
        router.get_input_schema().model_validate({"query": KNOWN_Q})
    assert isinstance(router.invoke(KNOWN_Q), AIMessage)
    output = router.get_output_jsonschema()
    assert {"$ref": "#/$defs/AIMessage"} in output["oneOf"] and "Runnable" not in str(output)
    answer = router.invoke({"question": KNOWN_Q})
    assert isinstance(answer, AIMessage) and answer.content
    assert router.get_output_schema().model_validate(answer).root == answer


def test_string_chains_give_a_string_output(knn_gate, llm):
    router = gated_router(
        knn_gate, direct=PROMPT | llm | StrOutputParser(), retrieval=RAG_PROMPT | llm | StrOutputParser()
    )
    assert router.OutputType is str
    assert router.get_output_jsonschema()["type"] == "string"
    assert isinstance(router.invoke({"question": KNOWN_Q}), str)


def test_untyped_branches_take_the_gates_input_and_build_a_schema(knn_gate):
    """Functions declare no types: the input is the gate's, the output any value, and
    both schemas still build (the output was once the type ``Runnable``)."""
    router = gated_router(knn_gate, direct=lambda q: f"direct: {q}", retrieval=RunnableLambda(lambda q: q))
    assert router.get_input_jsonschema() == GateRunnable(knn_gate).get_input_jsonschema()
    assert router.get_output_jsonschema() == {"title": "gated_router_output"}


def test_the_typed_branches_give_the_input_and_all_give_the_output(knn_gate, llm):
    def as_message(value: dict) -> AIMessage:
        return AIMessage(content=f"direct: {value['question']}")

    router = gated_router(knn_gate, direct=RunnableLambda(lambda q: q), retrieval=RAG_PROMPT | llm)
    assert router.get_input_jsonschema()["$defs"]["PromptInput"] == RAG_PROMPT.get_input_jsonschema()
    mixed = gated_router(knn_gate, direct=as_message, retrieval=RAG_PROMPT | llm)
    # An AIMessage and a chat model's any-message: any message.
    assert mixed.OutputType == llm.OutputType
    assert mixed.invoke({"question": KNOWN_Q}) == AIMessage(content=f"direct: {KNOWN_Q}")

    def count(value: dict) -> int:
        return len(value)

    def known(value: dict) -> bool:
        return True

    def word(value: dict) -> str:
        return "word"

    assert gated_router(knn_gate, direct=count, retrieval=known).OutputType is int
    assert gated_router(knn_gate, direct=count, retrieval=word).get_output_jsonschema() == {
        "title": "gated_router_output"
    }


def test_the_input_is_what_every_branch_reads(knn_gate, llm, passage_store):
    """A retriever chain reads a string, a chat model a string or messages, a prompt of
    one variable that variable as a dict or a string: a string is what they share. A
    branch reading its part of a dict (``itemgetter``) shares the dict with the prompt."""
    retriever = passage_store("in-memory").as_retriever(search_kwargs={"k": 1})
    rag = {"context": retriever, "question": RunnablePassthrough()} | RAG_PROMPT | llm
    assert gated_router(knn_gate, direct=PROMPT | llm, retrieval=rag).InputType is str
    assert gated_router(knn_gate, direct=llm, retrieval=retriever).get_input_jsonschema()["type"] == "string"
    by_key = {"context": itemgetter("question") | retriever, "question": itemgetter("question")} | RAG_PROMPT | llm
    keyed = gated_router(knn_gate, direct=PROMPT | llm, retrieval=by_key)
    assert keyed.get_input_jsonschema() == PROMPT.get_input_jsonschema()
    # Two prompts of different variables read the dict holding both.
    both = ChatPromptTemplate.from_messages([("human", "{context} {question}")])
    merged = gated_router(knn_gate, direct=PROMPT | llm, retrieval=both | llm).get_input_jsonschema()
    assert merged == both.get_input_jsonschema() and sorted(merged["required"]) == ["context", "question"]


def test_branches_that_read_no_input_in_common_are_refused_when_built(knn_gate, llm, passage_store):
    """The README's RAG chain reads a string only; a prompt of two variables, a dict only:
    whatever the router were given, one of them could not read it."""
    retriever = passage_store("in-memory").as_retriever(search_kwargs={"k": 1})
    rag = {"context": retriever, "question": RunnablePassthrough()} | RAG_PROMPT | llm
    both = ChatPromptTemplate.from_messages([("human", "{context} {question}")]) | llm
    with pytest.raises(DisagreeingBranchesError) as refused:
        gated_router(knn_gate, direct=both, retrieval=rag)
    message = str(refused.value)
    assert "the routes accept no input in common" in message
    assert "'direct' takes a dict with keys ['context', 'question']; 'retrieve' takes a string" in message
    assert isinstance(refused.value, ValueError)

    def count(value: list[int]) -> int:
        return len(value)

    with pytest.raises(DisagreeingBranchesError, match="'retrieve' takes a string"):
        gated_router(knn_gate, direct=count, retrieval=retriever)


def test_a_branchs_configurable_fields_show_through(knn_gate, llm):
    tunable = llm.configurable_fields(max_tokens=ConfigurableField(id="answer_tokens"))
    router = gated_router(knn_gate, direct=PROMPT | tunable, retrieval=RAG_PROMPT | tunable)
    ids = {spec.id for spec in router.config_specs}
    assert "answer_tokens" in ids and {spec.id for spec in GateRunnable(knn_gate).config_specs} <= ids
    assert router.get_config_jsonschema()["properties"]["configurable"]
    one = router.invoke({"question": KNOWN_Q}, {"configurable": {"answer_tokens": 1}})
    assert one.usage_metadata["output_tokens"] == 1
    assert router.invoke({"question": KNOWN_Q}).usage_metadata["output_tokens"] == 3


def test_the_gates_keys_are_the_routers_and_a_misspelt_one_is_refused(knn_gate):
    branch = RunnableLambda(lambda x: x)
    router = gated_router(knn_gate, direct=branch, retrieval=branch)
    fields = router.get_config_jsonschema()["$defs"]["Configurable"]["properties"]
    assert {"gate_threshold", "gate_retrieval", "gate_name", "gate_target_rate"} <= set(fields)
    assert router.invoke(KNOWN_Q, {"configurable": {"gate_retrieval": "always"}}) == KNOWN_Q
    with pytest.raises(ValueError, match="did you mean 'gate_threshold'"):
        router.invoke(KNOWN_Q, {"configurable": {"gate_treshold": 0.2}})


def test_the_config_schemas_refuse_a_misspelt_gate_key_and_undeclared_keys(knn_gate, passage_store):
    """What validates a config by the schema (LangServe does, for every request) refuses
    what the runnable would never read, instead of dropping it."""
    branch = RunnableLambda(lambda x: x)
    retriever = passage_store("in-memory").as_retriever(search_kwargs={"k": 1})
    runnables = [
        gated_router(knn_gate, direct=branch, retrieval=branch),
        GateRunnable(knn_gate),
        GatedRetriever(retriever=retriever, gate=knn_gate),
    ]
    for runnable in runnables:
        schema = runnable.config_schema()
        assert schema.model_validate({"configurable": {"gate_threshold": 0.2}}).configurable.gate_threshold == 0.2
        with pytest.raises(ValidationError, match="unknown configurable key 'gate_treshold'; did you mean"):
            schema.model_validate({"configurable": {"gate_treshold": 0.2}})
        with pytest.raises(ValidationError, match="Extra inputs are not permitted"):
            schema.model_validate({"configurable": {"answer_tokens": 2}})
        configurable = runnable.get_config_jsonschema()["$defs"]["Configurable"]
        assert configurable["additionalProperties"] is False and "gate_threshold" in configurable["properties"]


def test_the_draft_answers_as_a_message_when_the_branches_give_messages(llm):
    calls = _ChatCalls()
    counted = llm.with_config(callbacks=[calls])
    router = gated_router(_confident_gate(), direct=PROMPT | counted, retrieval=RAG_PROMPT | counted)
    assert router.invoke({"question": FRANCE_Q}) == AIMessage(content="Paris")
    with_decision = gated_router(
        _confident_gate(), direct=PROMPT | counted, retrieval=RAG_PROMPT | counted, include_decision=True
    )
    out = with_decision.invoke({"question": FRANCE_Q})
    assert out["answer"] == AIMessage(content="Paris") and out["route"] == "draft"
    assert out["gate_decision"]["draft_answer"] == "Paris"
    assert calls.calls == 0  # the gate's answer stood: no branch asked the model


def test_the_draft_answers_as_text_for_string_branches_or_as_given(llm):
    strings = PROMPT | llm | StrOutputParser()
    assert gated_router(_confident_gate(), direct=strings, retrieval=strings).invoke({"question": FRANCE_Q}) == "Paris"
    shouted = gated_router(
        _confident_gate(), direct=PROMPT | llm, retrieval=PROMPT | llm, draft=lambda d: d.draft_answer.upper()
    )
    assert shouted.invoke({"question": FRANCE_Q}) == "PARIS"


def test_the_decision_output_schema_holds_the_answer_type(knn_gate, llm):
    strings = PROMPT | llm | StrOutputParser()
    router = gated_router(knn_gate, direct=strings, retrieval=strings, include_decision=True)
    schema = router.get_output_jsonschema()
    assert schema["required"] == ["answer", "gate_decision", "route"]
    assert schema["properties"]["answer"]["type"] == "string"
    assert schema["properties"]["gate_decision"]["type"] == "object"
    out = router.invoke({"question": KNOWN_Q})
    assert router.get_output_schema().model_validate(out).route == "direct"
    messages = gated_router(knn_gate, direct=PROMPT | llm, retrieval=RAG_PROMPT | llm, include_decision=True)
    answer = messages.get_output_jsonschema()["properties"]["answer"]
    assert {"$ref": "#/$defs/AIMessage"} in answer["oneOf"]
