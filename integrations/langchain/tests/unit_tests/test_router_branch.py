"""The router as a LangChain branch: serialised by LangChain (``dumps``/``loads``) with
its gate as the directory it was saved in and the embedded chat model by its options, and drawn by ``get_graph`` as one
conditional node with an edge per named route. Over a real SKR-kNN gate (embedded
MiniLM), saved to and loaded from a real directory."""

import asyncio
import json

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.load import dumps, loads
from langchain_core.output_parsers import StrOutputParser
from langchain_core.prompts import ChatPromptTemplate, PromptTemplate
from langchain_core.runnables import RunnableLambda

from adaptive_gates import GateLoadError, SKRKnnGate, VerbalizedGate
from langchain_adaptive_gates import (
    IMPORT_MAPPINGS,
    AdaptiveGatesChatModel,
    GatedRouter,
    LangChainChatModel,
    SavedGateRunnable,
    ScoreBands,
    gated_router,
)

from ..conftest import KNOWN, UNKNOWN
from .chat_doubles import scripted
from .test_router import KNOWN_Q, UNKNOWN_Q

pytestmark = pytest.mark.filterwarnings("ignore:The function `loads` is in beta")


def _load(text: str):
    return loads(
        text,
        valid_namespaces=["langchain_adaptive_gates"],
        allowed_objects="core",
        additional_import_mappings=IMPORT_MAPPINGS,
    )


def _prompt(label: str) -> PromptTemplate:
    return PromptTemplate.from_template(label + ": {query}")


@pytest.fixture
def saved(knn_gate, tmp_path):
    """The gate saved in a directory, and a router over that directory with named
    routes, score bands and options away from their defaults."""
    path = tmp_path / "gate"
    knn_gate.save(path)
    routes = {"direct": _prompt("direct"), "retrieve": _prompt("rag"), "multi_step": _prompt("deep")}
    router = gated_router(
        str(path),
        routes=routes,
        choose=ScoreBands([(0.3, "direct"), (0.7, "retrieve")], above="multi_step"),
        draft=None,
        include_decision=True,
        input_key="query",
    )
    return path, router


def _routes(router, questions):
    return [(out["route"], out["answer"].to_string()) for out in router.batch([{"query": q} for q in questions])]


def test_dumps_and_loads_give_the_router_back_with_its_gate_read_from_its_directory(saved, core_embedder):
    path, router = saved
    assert GatedRouter.is_lc_serializable() and router.to_json()["id"] == ["langchain_adaptive_gates", "GatedRouter"]
    text = dumps(router)
    gate = json.loads(text)["kwargs"]["gate"]
    assert gate == {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain_adaptive_gates", "SavedGateRunnable"],
        "kwargs": {"path": str(path), "input_key": "query"},
    }
    loaded = _load(text)
    assert isinstance(loaded, GatedRouter) and isinstance(loaded.gate, SavedGateRunnable)
    assert loaded.routes == router.routes and loaded.choose == router.choose
    assert _routes(loaded, [KNOWN_Q, UNKNOWN_Q]) == [
        ("direct", f"direct: {KNOWN_Q}"),
        ("multi_step", f"deep: {UNKNOWN_Q}"),
    ]
    assert dumps(loaded) == text

    # The JSON names the directory, not a copy of the gate: a gate saved there since,
    # taught the opposite labels, is the one loaded.
    flipped = SKRKnnGate(core_embedder, k=1).fit(KNOWN + UNKNOWN, [1] * len(KNOWN) + [0] * len(UNKNOWN))
    flipped.save(path, overwrite=True)
    assert _routes(_load(text), [KNOWN_Q, UNKNOWN_Q]) == [
        ("multi_step", f"deep: {KNOWN_Q}"),
        ("direct", f"direct: {UNKNOWN_Q}"),
    ]
    with pytest.raises(GateLoadError, match=f"{path.parent / 'moved'}: not a saved gate directory"):
        _load(text.replace(str(path), str(path.parent / "moved")))


def test_what_langchain_cannot_write_is_refused_when_loaded(knn_gate, saved):
    path, _ = saved
    in_memory = gated_router(knn_gate, routes={"direct": _prompt("d"), "retrieve": _prompt("r")})
    written = json.loads(dumps(in_memory))
    assert written["kwargs"]["gate"]["type"] == "not_implemented"  # a gate object has no directory
    assert written["kwargs"]["routes"]["retrieve"]["id"][-1] == "PromptTemplate"
    with pytest.raises(NotImplementedError, match="GateRunnable"):
        _load(dumps(in_memory))
    by_function = gated_router(str(path), direct=lambda q: q, retrieval=_prompt("r"), choose=lambda d: "direct")
    kwargs = json.loads(dumps(by_function))["kwargs"]
    assert kwargs["choose"]["type"] == kwargs["routes"]["direct"]["kwargs"]["bound"]["type"] == "not_implemented"
    with pytest.raises(NotImplementedError):
        _load(dumps(by_function))


def test_a_router_over_the_embedded_chat_model_is_written_and_loaded_again(saved, one_torch_thread):
    """The embedded SmolLM2 as a LangChain chat model is written by its options; loaded,
    the router answers as the one written. One over a given core chat model has no
    JSON form: it is written as not implemented and refused when loaded."""
    path, _ = saved
    llm = AdaptiveGatesChatModel(max_tokens=3)
    chain = ChatPromptTemplate.from_template("{question}") | llm | StrOutputParser()
    router = gated_router(str(path), direct=chain, retrieval=chain)
    text = dumps(router)
    model = json.loads(text)["kwargs"]["routes"]["direct"]["kwargs"]["middle"][0]
    assert model == {
        "lc": 1,
        "type": "constructor",
        "id": ["langchain_adaptive_gates", "AdaptiveGatesChatModel"],
        "kwargs": {"max_tokens": 3},
        "name": "AdaptiveGatesChatModel",
    }
    loaded = _load(text)
    assert isinstance(loaded.routes["direct"].middle[0], AdaptiveGatesChatModel)
    assert loaded.invoke({"question": KNOWN_Q}) == router.invoke({"question": KNOWN_Q})
    assert dumps(loaded) == text

    given = AdaptiveGatesChatModel(chat_model=llm.backend, max_tokens=3)
    over_given = gated_router(str(path), direct=given, retrieval=given)
    assert json.loads(dumps(over_given))["kwargs"]["routes"]["direct"]["type"] == "not_implemented"
    with pytest.raises(NotImplementedError, match="AdaptiveGatesChatModel"):
        _load(dumps(over_given))


def _drawn(graph):
    """Each edge as (source name, target name, label, conditional), sorted."""
    names = {node.id: node.name for node in graph.nodes.values()}
    return sorted((names[e.source], names[e.target], e.data, e.conditional) for e in graph.edges)


def test_the_graph_is_one_conditional_node_with_an_edge_per_named_route(knn_gate):
    router = gated_router(knn_gate, direct=lambda q: q, retrieval=RunnableLambda(lambda q: q))
    assert _drawn(router.get_graph()) == [
        ("direct", "gated_router_output", None, False),
        ("draft", "gated_router_output", None, False),
        ("gate:skr-knn_input", "gated_router", None, False),  # the routes declare no input: the gate's
        ("gated_router", "direct", "direct", True),
        ("gated_router", "draft", "draft", True),
        ("gated_router", "retrieve", "retrieve", True),
        ("retrieve", "gated_router_output", None, False),
    ]
    assert "-. &nbsp;retrieve&nbsp; .-> retrieve" in router.get_graph().draw_mermaid()

    named = gated_router(
        knn_gate,
        routes={"direct": _prompt("d"), "retrieve": _prompt("r"), "multi_step": _prompt("m")},
        choose=ScoreBands([(0.5, "direct")], above="multi_step"),
        draft=None,
    )
    chain = _prompt("rewrite") | named
    conditional = [e for e in _drawn(chain.get_graph()) if e[3]]
    assert conditional == [
        ("gated_router", "direct", "direct", True),
        ("gated_router", "multi_step", "multi_step", True),
        ("gated_router", "retrieve", "retrieve", True),
    ]
    assert "Lambda" not in {node.name for node in chain.get_graph().nodes.values()}


class _Parents(BaseCallbackHandler):
    """Each chain and chat-model run's name and its parent's name."""

    def __init__(self):
        self.runs = {}

    def on_chain_start(self, serialized, inputs, *, run_id, parent_run_id=None, **kwargs):
        self.runs[run_id] = (kwargs.get("name"), parent_run_id)

    def on_chat_model_start(self, serialized, messages, *, run_id, parent_run_id=None, **kwargs):
        self.runs[run_id] = ("chat model", parent_run_id)

    def tree(self):
        return sorted((name, self.runs.get(parent, (None,))[0]) for name, parent in self.runs.values())


def test_the_gates_chat_model_runs_under_the_router_blocking_or_awaited():
    """A gate's model is called without a config: its run still sits under the router's."""
    gate = VerbalizedGate(LangChainChatModel(scripted(*["Paris. certain"] * 2)), judge=False, top_logprobs=0)
    router = gated_router(gate, direct=RunnableLambda(lambda q: "d"), retrieval=RunnableLambda(lambda q: "r"))
    expected = [
        ("chat model", "gated_router"),
        ("draft_branch", "gated_router"),
        ("gate:verbalized", "gated_router"),
        ("gated_router", None),
    ]
    blocking, awaited = _Parents(), _Parents()
    assert router.invoke("What is the capital of France?", {"callbacks": [blocking]}) == "Paris"
    assert asyncio.run(router.ainvoke("What is the capital of France?", {"callbacks": [awaited]})) == "Paris"
    assert blocking.tree() == awaited.tree() == expected
