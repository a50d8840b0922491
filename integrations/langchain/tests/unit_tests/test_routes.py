"""Named routes chosen by score bands over a real SKR-kNN gate's scores (k=3 over the
hand-labelled memory, so a question's score is the share of its 3 nearest neighbours
that needed retrieval: 1/3, 2/3 or 1), by a function, and by the decision's verdict
where there is no score."""

import asyncio
import math

import pytest
from langchain_core.runnables import RunnableLambda

from adaptive_gates import GateDecision, SKRKnnGate, VerbalizedGate
from langchain_adaptive_gates import (
    METADATA_KEY,
    ROUTE_METADATA_KEY,
    GateRunnable,
    LangChainChatModel,
    RouteChoice,
    ScoreBands,
    gated_router,
)

from ..conftest import KNOWN, UNKNOWN
from .chat_doubles import UnreachableChatModel
from .test_router import _Runs

#: A known fact (two of its three neighbours known), an unknown figure (one known), and
#: a question about a document no model has (no neighbour known).
KNOWN_Q = "Who wrote Macbeth?"
UNKNOWN_Q = "What was the population of Nauru in the 2021 census?"
DOCUMENT_Q = "What did the memo from last week say?"
QUESTIONS = [KNOWN_Q, UNKNOWN_Q, DOCUMENT_Q]
#: Edges between the three scores above (printed from the gate: 1/3, 2/3 and 1).
BANDS = ScoreBands([(0.5, "direct"), (0.8, "retrieve")], above="multi_step")


@pytest.fixture(scope="module")
def knn3_gate(core_embedder):
    return SKRKnnGate(core_embedder, k=3).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))


def _routes():
    return {name: RunnableLambda(lambda q, name=name: f"{name}: {q}") for name in ("direct", "retrieve", "multi_step")}


def test_the_questions_scores_fall_in_three_bands(knn3_gate):
    """The bands below are meaningful only if the real scores sit between the edges."""
    scores = [d.score for d in knn3_gate.decide_batch(QUESTIONS)]
    assert scores[0] < 0.5 < scores[1] < 0.8 < scores[2], scores
    assert [BANDS.route_of(s) for s in scores] == ["direct", "retrieve", "multi_step"]


def test_score_bands_hold_their_edge_and_refuse_bad_bands():
    bands = ScoreBands([(0.3, "direct"), (0.7, "retrieve")], above="multi_step")
    assert [bands.route_of(s) for s in (-1.0, 0.3, 0.31, 0.7, 0.71, math.inf)] == [
        "direct",
        "direct",
        "retrieve",
        "retrieve",
        "multi_step",
        "multi_step",
    ]
    assert bands.routes == ["direct", "retrieve", "multi_step"]
    with pytest.raises(ValueError, match="at least one"):
        ScoreBands([], above="retrieve")
    with pytest.raises(ValueError, match="strictly increasing"):
        ScoreBands([(0.7, "direct"), (0.3, "retrieve")], above="multi_step")
    with pytest.raises(ValueError, match="strictly increasing"):
        ScoreBands([(math.nan, "direct")], above="retrieve")
    with pytest.raises(ValueError, match="non-empty strings"):
        ScoreBands([(0.5, "")], above="retrieve")


def test_one_band_at_the_threshold_decides_as_the_gate(knn3_gate):
    """Edges are inclusive as thresholds are: at a threshold equal to a real score, the
    gate and one band at that edge agree on every question."""
    edge = knn3_gate.decide(UNKNOWN_Q).score
    at_edge = {"configurable": {"gate_threshold": edge}}
    decisions = GateRunnable(knn3_gate).batch(QUESTIONS, at_edge)
    one_band = RouteChoice(ScoreBands([(edge, "direct")], above="retrieve"))
    assert [one_band(d) for d in decisions] == [RouteChoice()(d) for d in decisions] == ["direct", "direct", "retrieve"]


def test_named_routes_are_chosen_by_the_bands_in_every_mode(knn3_gate):
    router = gated_router(knn3_gate, routes=_routes(), choose=BANDS)
    expected = ["direct: " + KNOWN_Q, "retrieve: " + UNKNOWN_Q, "multi_step: " + DOCUMENT_Q]
    assert router.batch(QUESTIONS) == expected
    assert asyncio.run(router.abatch(QUESTIONS)) == expected
    assert router.invoke(DOCUMENT_Q) == expected[2]
    assert asyncio.run(router.ainvoke(KNOWN_Q)) == expected[0]
    assert "".join(router.stream(UNKNOWN_Q)) == expected[1]


def test_the_route_is_in_the_branch_runs_tags_and_metadata(knn3_gate):
    router = gated_router(knn3_gate, routes=_routes(), choose=BANDS)
    runs = _Runs()
    router.invoke(DOCUMENT_Q, {"callbacks": [runs]})
    _, tags, metadata = next(r for r in runs.starts if r[0] == "multi_step_branch")
    assert "adaptive-gates:multi_step" in tags and metadata[ROUTE_METADATA_KEY] == "multi_step"
    assert metadata[METADATA_KEY]["score"] == 1.0


def test_a_decision_without_a_score_goes_by_its_verdict(knn3_gate):
    """A forced decision (and a fallback) has no score: the bands cannot place it, so
    it takes the retrieve or direct route its verdict names."""
    router = gated_router(knn3_gate, routes=_routes(), choose=BANDS)
    forced = [{"configurable": {"gate_retrieval": "always"}}, {"configurable": {"gate_retrieval": "never"}}]
    assert router.batch([DOCUMENT_Q, DOCUMENT_Q], forced) == ["retrieve: " + DOCUMENT_Q, "direct: " + DOCUMENT_Q]
    failing = VerbalizedGate(LangChainChatModel(UnreachableChatModel()), judge=False)
    assert gated_router(failing, routes=_routes(), choose=BANDS).invoke(KNOWN_Q) == "retrieve: " + KNOWN_Q


def test_a_function_chooses_the_route(knn3_gate):
    def by_neighbours(decision):
        return "multi_step" if decision.details["n_known"] == 0 else "direct"

    router = gated_router(knn3_gate, routes=_routes(), choose=by_neighbours, include_decision=True)
    out = router.batch([KNOWN_Q, DOCUMENT_Q])
    assert [o["route"] for o in out] == ["direct", "multi_step"]
    assert out[1]["answer"] == "multi_step: " + DOCUMENT_Q


def test_a_choice_naming_no_route_is_a_clear_error(knn3_gate):
    router = gated_router(knn3_gate, routes=_routes(), choose=lambda d: "web")
    with pytest.raises(ValueError, match=r"'web', which is not one of the routes \['direct', 'draft'"):
        router.invoke(KNOWN_Q)
    results = router.batch([KNOWN_Q, UNKNOWN_Q], return_exceptions=True)
    assert [type(r).__name__ for r in results] == ["ValueError", "ValueError"]


def test_routes_are_checked_when_the_router_is_built(knn3_gate):
    with pytest.raises(
        ValueError, match=r"\['web'\] are not among the router's routes \['direct', 'draft', 'retrieve'\]"
    ):
        gated_router(
            knn3_gate,
            routes={"direct": _routes()["direct"], "retrieve": _routes()["retrieve"]},
            choose=ScoreBands([(0.5, "direct")], above="web"),
        )
    with pytest.raises(ValueError, match=r"\['retrieve'\] are not among"):
        gated_router(knn3_gate, routes={"direct": RunnableLambda(str)})
    with pytest.raises(ValueError, match="either routes= or direct="):
        gated_router(knn3_gate, routes=_routes(), direct=RunnableLambda(str))
    with pytest.raises(ValueError, match="both direct= and retrieval="):
        gated_router(knn3_gate, direct=RunnableLambda(str))
    with pytest.raises(ValueError, match="draft answers"):
        gated_router(knn3_gate, routes={**_routes(), "draft": RunnableLambda(str)})
    with pytest.raises(ValueError, match=r"\['draft'\] are not among"):
        gated_router(knn3_gate, routes=_routes(), choose=RouteChoice(BANDS, drafts=True), draft=None)
    with pytest.raises(TypeError, match="choose must be"):
        gated_router(knn3_gate, routes=_routes(), choose=0.5)
    with pytest.raises(TypeError, match="draft must be"):
        gated_router(knn3_gate, routes=_routes(), draft="text")
    # With the draft route off, a route of that name is the user's own.
    own = gated_router(
        knn3_gate, routes={**_routes(), "draft": RunnableLambda(str)}, draft=None, choose=lambda d: "draft"
    )
    assert own.invoke(KNOWN_Q) == KNOWN_Q


@pytest.mark.parametrize("draft, route", [(None, "direct"), ("", "direct"), ("  ", "direct"), ("Paris", "draft")])
def test_only_a_usable_draft_takes_the_draft_route(draft, route):
    """The router reads the decision's own route, as the other doors do: a blank draft
    is answered directly."""
    decision = GateDecision(False, 0.1, 0.5, "g", question="q", draft_answer=draft)
    assert RouteChoice()(decision) == decision.route == route
    assert RouteChoice(drafts=False)(decision) == "direct"
