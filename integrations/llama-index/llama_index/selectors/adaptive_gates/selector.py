"""``GateSelector``: a gate choosing, per query, among a router's choices."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.base_selector import BaseSelector, SelectorResult, SingleSelection
from llama_index.core.instrumentation import get_dispatcher
from llama_index.core.prompts.mixin import PromptDictType
from llama_index.core.schema import QueryBundle
from llama_index.core.tools.types import ToolMetadata

from adaptive_gates import Gate, PopularityGate
from adaptive_gates.extend import DIRECT, DRAFT, RETRIEVE, ROUTES, Feedback

from .gating import Decided, adecide, decide, response_feedback, route_of
from .handoff import RetrievalWatch, keep_decisions
from .reason import selection_reason

dispatcher = get_dispatcher(__name__)

#: With two choices and no ``routes``: choice 0 answers directly, choice 1 retrieves.
DEFAULT_ROUTES: Mapping[str, int] = {DIRECT: 0, RETRIEVE: 1}


class GateSelector(BaseSelector):
    """Any core gate as the selector of a ``RouterQueryEngine`` or ``RouterRetriever``.

    The gate judges the query's ``query_str`` (a query given only as its ``embedding``:
    see ``gating.vector_of``); the selector picks the choice its decision routes to.
    By default there are two choices, in this order::

        RouterQueryEngine(
            selector=GateSelector(gate),
            query_engine_tools=[
                QueryEngineTool.from_defaults(EmptyIndex().as_query_engine(llm=llm),
                                              description="answers from the LLM alone"),
                QueryEngineTool.from_defaults(index.as_query_engine(llm=llm),
                                              description="answers from the documents"),
            ],
        )

    (``EmptyIndex().as_query_engine`` is LlamaIndex's own LLM-only engine; in a
    ``RouterRetriever`` the direct choice is ``EmptyIndex().as_retriever()``, which
    returns no nodes.) Other orders, and more than two choices, take ``routes``.

    The selection's ``reason`` is a readable line followed by the decision as JSON;
    ``decision_of(response)`` reads the ``GateDecision`` back from a router's response
    (``response.metadata["selector_result"]``). Each decision is also fired as a
    ``GateDecisionEvent`` inside the selector's span, after a ``GateLLMCallEvent`` for
    every request the gate sent its LLM.

    Selecting never fails because of the gate: a gate whose model fails returns its
    fallback decision (``GateDecision.error`` set; retrieve unless the gate was built
    with ``fallback_retrieve=False``) and the selector follows it; a gate that raises
    (e.g. a bug in a custom gate) is treated the same way, with the gate's
    ``fallback_retrieve`` and the exception recorded as the error. A gate that cannot
    decide at all is raised: ``NotFittedError`` (not fitted or loaded) and
    ``BackendMisconfiguredError`` (a backend that cannot serve the gate, e.g. one
    without log-probabilities). This is the core's door policy
    (``adaptive_gates.extend.decide_or_fallback``), the same as LangChain's. A ``routes`` entry
    that names no choice raises ``ValueError``: that is a configuration mistake.

    A gate that retrieves to decide (a draft-check gate) keeps the passages it checked
    on a decision to retrieve; a ``GatePassagesRetriever`` in the retrieve choice returns
    them instead of retrieving again. When the retrieve choice asks another retriever
    the same question instead (a plain retriever, an index's query engine), the
    selector logs a warning, once: that choice retrieves a second time
    (``handoff.RetrievalWatch``), as LangChain's ``GatedRouter`` warns when built so.

    Args:
        gate: any fitted core gate.
        routes: the choice of each route, as an index or as a choice's name (or, when
            no name matches, its description): ``"retrieve"`` and ``"direct"`` are
            required, ``"draft"`` defaults to the direct choice. Default:
            ``DEFAULT_ROUTES`` (two choices: 0 direct, 1 retrieve).
    """

    def __init__(self, gate: Gate, routes: Mapping[str, int | str] | None = None) -> None:
        if not isinstance(gate, Gate):
            raise TypeError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        self._gate = gate
        self._explicit_routes = routes is not None
        self._routes = _checked_routes(DEFAULT_ROUTES if routes is None else routes)
        self._watch = RetrievalWatch()
        keep_decisions()

    @classmethod
    def from_defaults(cls, gate: Gate | None = None, routes: Mapping[str, int | str] | None = None) -> GateSelector:
        """A selector as LlamaIndex's own selectors are built (``LLMSingleSelector.from_defaults``).

        With no ``gate``, the ``PopularityGate``: it needs no fitting, no LLM and no
        embedding model (it retrieves for questions about rare things, by their rarest
        word), so the selector works offline as it is; fit or calibrate a gate on your
        own outcomes for better decisions. A ``RouterQueryEngine`` still needs an LLM
        (``Settings.llm`` or ``llm=``) for the summarizer it builds, though the selector
        asks none.

        Args:
            gate: any core gate; default ``PopularityGate()``.
            routes: see the class (default: choice 0 direct, 1 retrieve).
        """
        return cls(PopularityGate() if gate is None else gate, routes)

    @property
    def gate(self) -> Gate:
        """The gate deciding."""
        return self._gate

    @property
    def routes(self) -> dict[str, int | str]:
        """Each route's choice (index or name), ``draft`` included."""
        return dict(self._routes)

    def record_feedback(self, response: Any, correct: bool) -> Feedback:
        """Teach the gate whether the answer of a router this selector chose for was
        correct (see ``response_feedback``)."""
        return response_feedback(self._gate, response, correct)

    # ----------------------------------------------------------------- prompts: none
    def _get_prompts(self) -> PromptDictType:
        return {}

    def _update_prompts(self, prompts: PromptDictType) -> None:
        """A gate's prompts belong to the gate; nothing to update here."""

    # ----------------------------------------------------------------- selection
    def _select(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        targets = self._targets(choices)
        self._watch.expect(None)  # the gate's own retrieval is no second one
        return self._selection(query, decide(self._gate, query.query_str, dispatcher, query.embedding), targets)

    async def _aselect(self, choices: Sequence[ToolMetadata], query: QueryBundle) -> SelectorResult:
        targets = self._targets(choices)
        self._watch.expect(None)
        decided = await adecide(self._gate, query.query_str, dispatcher, query.embedding)
        return self._selection(query, decided, targets)

    def _selection(self, query: QueryBundle, decided: Decided, targets: Mapping[str, int]) -> SelectorResult:
        self._watch.expect(query.query_str, decided.decision)
        route = route_of(decided.decision)
        reason = selection_reason(route, decided.decision, decided.payload)
        return SelectorResult(selections=[SingleSelection(index=targets[route], reason=reason)])

    def _targets(self, choices: Sequence[ToolMetadata]) -> dict[str, int]:
        """Each route's choice index among ``choices``."""
        if not self._explicit_routes and len(choices) != 2:
            raise ValueError(
                f"GateSelector got {len(choices)} choices; without routes= it takes exactly two"
                " (0: direct, 1: retrieve). Map the routes 'retrieve' and 'direct' (and optionally"
                " 'draft') to choice indices or names."
            )
        return {route: _index_of(target, choices, route) for route, target in self._routes.items()}


def _checked_routes(routes: Mapping[str, int | str]) -> dict[str, int | str]:
    unknown = set(routes) - set(ROUTES)
    if unknown:
        raise ValueError(f"unknown routes {sorted(unknown)}; the routes are {list(ROUTES)}")
    missing = {RETRIEVE, DIRECT} - set(routes)
    if missing:
        raise ValueError(f"routes must map {sorted(missing)} to a choice")
    for route, target in routes.items():
        valid_index = isinstance(target, int) and not isinstance(target, bool) and target >= 0
        if not valid_index and not (isinstance(target, str) and target):
            raise ValueError(f"route {route!r} must map to a choice index (>= 0) or name, got {target!r}")
    return {DRAFT: routes[DIRECT], **routes}


def _index_of(target: int | str, choices: Sequence[ToolMetadata], route: str) -> int:
    if isinstance(target, int):
        if target >= len(choices):
            raise ValueError(f"route {route!r} maps to choice {target}, but there are only {len(choices)} choices")
        return target
    for field in ("name", "description"):
        found = [i for i, choice in enumerate(choices) if getattr(choice, field) == target]
        if len(found) > 1:
            raise ValueError(f"route {route!r} maps to {target!r}, which is the {field} of choices {found}")
        if found:
            return found[0]
    names = [choice.name for choice in choices]
    raise ValueError(f"route {route!r} maps to {target!r}, which names no choice (names: {names})")


__all__ = ["DEFAULT_ROUTES", "GateSelector"]
