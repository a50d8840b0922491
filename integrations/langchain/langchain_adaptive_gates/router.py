"""``GatedRouter``: a gate choosing, per input, the route that answers it.

It is LangChain's recommended routing form, a runnable that returns the runnable to
run: a ``RunnableLambda`` whose function decides and returns the chosen route, which
LangChain then runs on the same input. So every mode works as LangChain's own
(``invoke``, ``ainvoke``, ``stream``, ``astream``, ``astream_events``) and the chosen
route streams; ``batch``/``abatch`` decide all inputs in one ``decide_batch`` call. A
call makes three runs: the router's, the gate's and the chosen route's.

A gate that retrieves to decide (a draft-check gate) passes its passages on: the
decision is in the chosen route's run metadata, where a ``GatePassagesRetriever`` in
the retrieve branch finds them, so the branch answers over the passages the gate
checked and retrieves nothing again.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import get_executor_for_config
from langchain_core.runnables.utils import gather_with_concurrency
from langchain_core.utils.pydantic import TypeBaseModel, create_model_v2
from pydantic import BaseModel

from adaptive_gates import Gate, GateDecision

from . import steps
from .answers import DraftAnswer, WithDecision, decision_output_fields, draft_for, draft_route
from .branch_types import common_output_type, input_source
from .event_names import GateEventsInNames
from .gate_runnable import GateRunnable
from .passages import ROUTE_DECISION_KEY, GatePassagesRetriever
from .routes import DIRECT, DRAFT, RETRIEVE, Choose, RouteChoice, ScoreBands, check_routes, checked_route

#: Tag on the chosen route's run: ``adaptive-gates:<route>`` (``…:retrieve``, ``…:direct``,
#: ``…:draft`` or a named route), beside ``adaptive-gates:gate:<gate name>``.
TAG_PREFIX = "adaptive-gates:"
#: Metadata key of the chosen route's run holding the decision (as a dict); every run
#: inside the route inherits it (``GatePassagesRetriever`` reads the passages there).
METADATA_KEY = ROUTE_DECISION_KEY

logger = logging.getLogger(__name__)
#: Metadata key of the chosen route's run holding the route's name.
ROUTE_METADATA_KEY = "gate_route"

Branch = Runnable | Callable[..., Any]


class GatedRouter(GateEventsInNames, RunnableLambda):
    """Decides with ``gate``, then runs the route ``choose(decision)`` names.

    Every route receives the router's input unchanged (a question string, a dict, a
    message list: see ``GateRunnable``). ``choose`` is any function from the decision
    to a route name, or ``ScoreBands`` (or ``None``) for the default ``RouteChoice``:
    a draft takes the draft route, a decision without a score its verdict's route
    (``"retrieve"``/``"direct"``), a scored one its score's band (or its verdict's
    route without bands). When the gate already answered (a confident verbalized
    reply) the ``DRAFT`` route answers ``draft(decision)`` without running a branch:
    by default the draft in the branches' output type (``"auto"``); ``None`` turns the
    route off.

    Its input type is the first route's that declares one (else the gate's), its
    output type the routes' common one; ``config_specs`` are the gate's and the
    routes'. With ``include_decision`` the output is ``{ANSWER_KEY: answer,
    DECISION_KEY: decision dict, ROUTE_KEY: route name}`` (see ``answers``).

    Its function and every route it builds have async twins, so ``ainvoke`` keeps the
    router's own work on the event loop (a thread hop costs more than the work).

    A gate that retrieves to decide (``Gate.retrieves_first``: a draft-check gate)
    serves its draft through the ``DRAFT`` route when it does not retrieve, and keeps
    the passages it checked on a decision that retrieves: a ``GatePassagesRetriever``
    in the retrieve branch returns them (from the route run's metadata) instead of
    retrieving again. A router whose gate retrieves first and whose ``"retrieve"``
    route holds no ``GatePassagesRetriever`` logs a warning when built: that branch
    would retrieve a second time.
    """

    def __init__(
        self,
        gate: GateRunnable,
        routes: Mapping[str, Branch],
        *,
        choose: Choose | ScoreBands | None = None,
        draft: DraftAnswer | Literal["auto"] | None = "auto",
        include_decision: bool = False,
    ) -> None:
        super().__init__(self._decide_route, afunc=self._adecide_route, name="gated_router")
        if not isinstance(gate, GateRunnable):
            raise TypeError(f"gate must be a GateRunnable (gated_router takes a bare Gate), got {type(gate).__name__}")
        if not routes:
            raise ValueError("a router needs at least one route")
        for name in routes:
            if not isinstance(name, str) or not name:
                raise ValueError(f"route names must be non-empty strings, got {name!r}")
        if draft is not None and DRAFT in routes:
            raise ValueError(f"{DRAFT!r} is the route of the gate's draft answers (draft=); name the route otherwise")
        self.gate = gate
        self.routes = {name: _coerce(branch, name) for name, branch in routes.items()}
        self.answer_type = common_output_type(list(self.routes.values()))
        if draft is not None and draft != "auto" and not callable(draft):
            raise TypeError(f"draft must be 'auto', None or a function of the decision, got {draft!r}")
        self.draft = draft_for(self.answer_type) if draft == "auto" else draft
        if choose is None or isinstance(choose, ScoreBands):
            choose = RouteChoice(choose, drafts=self.draft is not None)
        elif not callable(choose):
            raise TypeError(f"choose must be ScoreBands or a function of the decision, got {type(choose).__name__}")
        check_routes(choose, self._route_names)
        self.choose = choose
        self.include_decision = include_decision
        _warn_if_retrieving_twice(gate, self.routes.get(RETRIEVE))

    def __repr__(self) -> str:
        return f"GatedRouter(gate={self.gate.get_name()!r}, routes={self._route_names}, choose={self.choose!r})"

    # ----------------------------------------------------------------- types
    @functools.cached_property
    def deps(self) -> list[Runnable]:
        """The gate and the routes (LangChain's graph and ``config_specs`` read them)."""
        return [self.gate, *self.routes.values()]

    @property
    def InputType(self) -> Any:
        return input_source(list(self.routes.values()), self.gate).InputType

    def get_input_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return input_source(list(self.routes.values()), self.gate).get_input_schema(config)

    @property
    def OutputType(self) -> Any:
        return dict[str, Any] if self.include_decision else self.answer_type

    def get_output_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        if not self.include_decision:
            return super().get_output_schema(config)
        return create_model_v2(self.get_name("Output"), field_definitions=decision_output_fields(self.answer_type))

    # ----------------------------------------------------------------- routing
    def _decide_route(self, input: Any, config: RunnableConfig) -> Runnable:
        return self._route_for(self.gate.invoke(input, config))

    async def _adecide_route(self, input: Any, config: RunnableConfig) -> Runnable:
        return self._route_for(await self.gate.ainvoke(input, config))

    def _route_for(self, decision: GateDecision) -> Runnable:
        """The route ``decision`` takes, its run named, tagged and with the decision."""
        name = checked_route(self.choose(decision), self._route_names)
        route = draft_route(self.draft, decision) if name == DRAFT and self.draft is not None else self.routes[name]
        decided = decision.to_dict()
        route = route.with_config(
            run_name=f"{name}_branch",
            tags=[TAG_PREFIX + name, f"{TAG_PREFIX}gate:{decision.gate}"],
            metadata={METADATA_KEY: decided, ROUTE_METADATA_KEY: name},
        )
        return WithDecision(route, decided, name) if self.include_decision else route

    @functools.cached_property
    def _route_names(self) -> list[str]:
        return [*self.routes, *([DRAFT] if self.draft is not None else [])]

    # ----------------------------------------------------------------- batches
    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        run = functools.partial(self._route_all, return_exceptions=return_exceptions)
        return self._batch_with_config(run, list(inputs), config, return_exceptions=return_exceptions, run_type="chain")

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        run = functools.partial(self._aroute_all, return_exceptions=return_exceptions)
        return await self._abatch_with_config(
            run, list(inputs), config, return_exceptions=return_exceptions, run_type="chain"
        )

    def _route_all(self, inputs: list[Any], config: list[RunnableConfig], *, return_exceptions: bool) -> list[Any]:
        """One ``decide_batch`` for all inputs, then each chosen route, concurrently."""
        decisions = self.gate.batch(inputs, config, return_exceptions=return_exceptions)
        answers = self._answers(inputs, decisions, config, return_exceptions)
        if len(answers) == 1:
            return [steps.run(answers[0])]
        with get_executor_for_config(config[0]) as executor:
            return list(executor.map(steps.run, answers))

    async def _aroute_all(
        self, inputs: list[Any], config: list[RunnableConfig], *, return_exceptions: bool
    ) -> list[Any]:
        """``_route_all`` on the event loop."""
        decisions = await self.gate.abatch(inputs, config, return_exceptions=return_exceptions)
        answers = self._answers(inputs, decisions, config, return_exceptions)
        return await gather_with_concurrency(config[0].get("max_concurrency"), *map(steps.arun, answers))

    def _answers(
        self,
        inputs: list[Any],
        decisions: Sequence[GateDecision | Exception],
        config: list[RunnableConfig],
        return_exceptions: bool,
    ) -> list[steps.Steps[Any]]:
        """Each input's answer from the route its decision chose, written once for both
        paths (``steps``): a failed decision is its input's answer, and so is a failing
        route's (or choice's) exception under ``return_exceptions``."""
        return [self._answer(x, d, c, return_exceptions) for x, d, c in zip(inputs, decisions, config)]

    def _answer(
        self, value: Any, decision: GateDecision | Exception, config: RunnableConfig, return_exceptions: bool
    ) -> steps.Steps[Any]:
        if isinstance(decision, Exception):
            return decision
        try:
            return (yield steps.Invoke(self._route_for(decision), value, config))
        except Exception as exc:
            if return_exceptions:
                return exc
            raise


def gated_router(
    gate: Gate | GateRunnable,
    *,
    direct: Branch | None = None,
    retrieval: Branch | None = None,
    routes: Mapping[str, Branch] | None = None,
    choose: Choose | ScoreBands | None = None,
    draft: DraftAnswer | Literal["auto"] | None = "auto",
    include_decision: bool = False,
    **gate_options: Any,
) -> GatedRouter:
    """A router sending each input to the route its gate decision chooses.

    Two routes: ``gated_router(gate, direct=llm_chain, retrieval=rag_chain)`` retrieves
    when the gate says so. Named routes: ``gated_router(gate, routes={"direct": ...,
    "retrieve": ..., "multi_step": ...}, choose=ScoreBands([(0.3, "direct"), (0.7,
    "retrieve")], above="multi_step"))``, or ``choose=`` any function from the decision
    to a route name; ``direct=``/``retrieval=`` are the routes ``"direct"`` and
    ``"retrieve"``. A confident verbalized gate's draft answer is the output without a
    second LLM call (``draft``; see ``GatedRouter``), and so is a draft-check gate's
    draft; its retrieving decisions are answered over the passages it checked when the
    retrieval branch retrieves through ``GatePassagesRetriever(retriever=...)``.
    ``include_decision=True`` returns
    ``{"answer": ..., "gate_decision": {...}, "route": ...}``.

    The decision is dispatched as the custom event ``DECISION_EVENT`` and is in the
    chosen route run's metadata (``METADATA_KEY``, the route under
    ``ROUTE_METADATA_KEY``) and tags (``TAG_PREFIX`` + route). Per-request control
    comes from ``configurable``. ``gate_options`` go to ``GateRunnable`` when a bare
    gate is given.
    """
    if gate_options and isinstance(gate, GateRunnable):
        raise ValueError("gate options apply to a bare gate; configure the GateRunnable itself")
    gate_runnable = gate if isinstance(gate, GateRunnable) else GateRunnable(gate, **gate_options)
    return GatedRouter(
        gate_runnable,
        _routes(direct, retrieval, routes),
        choose=choose,
        draft=draft,
        include_decision=include_decision,
    )


def _routes(direct: Branch | None, retrieval: Branch | None, routes: Mapping[str, Branch] | None) -> dict[str, Branch]:
    """The named routes, from ``routes=`` or from the two-route form."""
    if routes is not None:
        if direct is not None or retrieval is not None:
            raise ValueError("give either routes= or direct= and retrieval=, not both")
        return dict(routes)
    if direct is None or retrieval is None:
        raise ValueError("give both direct= and retrieval= (or routes= with named routes)")
    return {DIRECT: direct, RETRIEVE: retrieval}


def _warn_if_retrieving_twice(gate: GateRunnable, route: Runnable | None) -> None:
    """Warn when a gate that retrieves to decide routes to a retrieve branch that would
    retrieve again (one without a ``GatePassagesRetriever``)."""
    first = sorted(name for name, member in gate.gates.items() if member.retrieves_first)
    if route is None or not first or _reads_gate_passages(route):
        return
    logger.warning(
        "the gate %s retrieves to decide, and the 'retrieve' route's graph shows no GatePassagesRetriever: that "
        "route would retrieve a second time. Retrieve in it through GatePassagesRetriever(retriever=...) to "
        "answer over the passages the gate checked",
        " / ".join(first),
    )


def _reads_gate_passages(route: Runnable) -> bool:
    """Whether ``route``'s graph (``get_graph``) shows a ``GatePassagesRetriever``; true
    when it cannot be drawn, as nothing can be told then. (One called from inside a
    plain function is not shown, and is warned about though it works.)"""
    try:
        nodes = route.get_graph().nodes.values()
    except Exception:  # a runnable LangChain cannot draw
        return True
    return any(isinstance(node.data, GatePassagesRetriever) for node in nodes)


def _coerce(branch: Branch, name: str) -> Runnable:
    """``branch`` as LangChain coerces it (``coerce_to_runnable``), a function traced
    under the route's name."""
    runnable = coerce_to_runnable(branch)
    return runnable if isinstance(branch, Runnable) else runnable.with_config(run_name=name)
