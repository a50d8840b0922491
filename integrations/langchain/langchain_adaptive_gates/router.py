"""``GatedRouter``: a gate choosing, per input, the route that answers it.

It is a LangChain branch, as ``RunnableBranch`` is: one run that decides (the gate's
run under it) and then runs the chosen route under it, so a call makes three runs:
the router's, the gate's and the chosen route's. Every mode works as LangChain's own
(``invoke``, ``ainvoke``, ``stream``, ``astream``, ``astream_events``) and the chosen
route streams; ``batch``/``abatch`` decide all inputs in one ``decide_batch`` call.
LangChain serialises it (``dumps``/``loads``, its gate by the directory it was saved
in) and draws it (``get_graph``) as one conditional node with an edge per route.

A gate that retrieves to decide (a draft-check gate) passes its passages on: the
decision is in the chosen route's run metadata, where a ``GatePassagesRetriever`` in
the retrieve branch finds them, so the branch answers over the passages the gate
checked and retrieves nothing again.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal

from langchain_core.load.serializable import SerializedConstructor, SerializedNotImplemented
from langchain_core.runnables import Runnable, RunnableConfig, RunnableSerializable
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
    get_executor_for_config,
    var_child_runnable_config,
)
from langchain_core.runnables.graph import Graph, Node
from langchain_core.runnables.utils import ConfigurableFieldSpec, gather_with_concurrency, get_unique_config_specs
from langchain_core.utils.pydantic import TypeBaseModel, create_model_v2
from pydantic import BaseModel, ConfigDict, PrivateAttr

from adaptive_gates import Gate, GateDecision

from . import steps
from .answers import DraftAnswer, WithDecision, decision_output_fields, draft_for, draft_route
from .branch_types import AgreedInput, agreed_input, common_output_type
from .control import refusing_unknown_keys
from .event_names import GateEventsInNames
from .gate_runnable import GateRunnable
from .passages import ROUTE_DECISION_KEY, GatePassagesRetriever
from .routes import DIRECT, DRAFT, RETRIEVE, Choose, RouteChoice, ScoreBands, check_routes, checked_route
from .saved_gate import SavedGateRunnable
from .serialization import InPackageNamespace

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


class GatedRouter(GateEventsInNames, InPackageNamespace, RunnableSerializable[Any, Any]):
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

    Its input type is the input every route accepts (``branch_types.agreed_input``: a
    prompt's variables as a dict, a string when each route reads one, ...; the gate's
    when no route declares one), so LangServe validates a request by what every route
    can answer; routes that accept no input in common are refused when the router is
    built (``DisagreeingBranchesError``, a ``ValueError`` naming each route's forms).
    Its output type is the routes' common one; ``config_specs`` are the gate's and the
    routes'. With ``include_decision`` the output is ``{ANSWER_KEY: answer,
    DECISION_KEY: decision dict, ROUTE_KEY: route name}`` (see ``answers``).

    The async paths keep the router's own work on the event loop (a thread hop costs
    more than the work).

    LangChain serialises it (``is_lc_serializable()``, ``to_json()``,
    ``langchain_core.load.dumps``): its JSON holds the gate as the directory it was
    saved in (a ``SavedGateRunnable``: ``gated_router("path/to/gate", ...)``), the
    routes as LangChain writes them, the ``ScoreBands`` and the options. Loading it
    (``loads(..., valid_namespaces=["langchain_adaptive_gates"],
    additional_import_mappings=IMPORT_MAPPINGS)``) loads the gate from that directory
    again. What LangChain cannot write (a gate given as an object, a plain function
    as a route, ``choose`` or ``draft``) is written as not implemented, as LangChain
    writes such parts of any chain, and ``loads`` refuses it.

    ``get_graph()`` draws it as LangChain draws a branch: the input, one node for the
    router, a conditional edge to each route named by the route (``"draft"`` too when
    drafts are answered), and the output.

    A gate that retrieves to decide (``Gate.retrieves_first``: a draft-check gate)
    serves its draft through the ``DRAFT`` route when it does not retrieve, and keeps
    the passages it checked on a decision that retrieves: a ``GatePassagesRetriever``
    in the retrieve branch returns them (from the route run's metadata) instead of
    retrieving again. A router whose gate retrieves first and whose ``"retrieve"``
    route holds no ``GatePassagesRetriever`` logs a warning when built: that branch
    would retrieve a second time.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    gate: GateRunnable
    routes: dict[str, Runnable]
    choose: Any
    draft: Any = None
    include_decision: bool = False

    _answer_type: Any = PrivateAttr()
    _input: AgreedInput | None = PrivateAttr()
    _route_names: list[str] = PrivateAttr()
    _given: dict[str, Any] = PrivateAttr()  # choose= and draft= as given, for the JSON

    def __init__(
        self,
        gate: GateRunnable,
        routes: Mapping[str, Branch],
        *,
        choose: Choose | ScoreBands | None = None,
        draft: DraftAnswer | Literal["auto"] | None = "auto",
        include_decision: bool = False,
    ) -> None:
        if not isinstance(gate, GateRunnable):
            raise TypeError(f"gate must be a GateRunnable (gated_router takes a bare Gate), got {type(gate).__name__}")
        if not routes:
            raise ValueError("a router needs at least one route")
        for name in routes:
            if not isinstance(name, str) or not name:
                raise ValueError(f"route names must be non-empty strings, got {name!r}")
        if draft is not None and DRAFT in routes:
            raise ValueError(f"{DRAFT!r} is the route of the gate's draft answers (draft=); name the route otherwise")
        coerced = {name: _coerce(branch, name) for name, branch in routes.items()}
        answer_type = common_output_type(list(coerced.values()))
        agreed = agreed_input(coerced, "gated_router_input")  # refuses routes that agree on no input
        if draft is not None and draft != "auto" and not callable(draft):
            raise TypeError(f"draft must be 'auto', None or a function of the decision, got {draft!r}")
        answer_draft = draft_for(answer_type) if draft == "auto" else draft
        given_choose = choose
        if choose is None or isinstance(choose, ScoreBands):
            choose = RouteChoice(choose, drafts=answer_draft is not None)
        elif not callable(choose):
            raise TypeError(f"choose must be ScoreBands or a function of the decision, got {type(choose).__name__}")
        route_names = [*coerced, *([DRAFT] if answer_draft is not None else [])]
        check_routes(choose, route_names)
        super().__init__(  # type: ignore[call-arg]  # the fields of this model
            gate=gate,
            routes=coerced,
            choose=choose,
            draft=answer_draft,
            include_decision=include_decision,
            name="gated_router",
        )
        self._answer_type = answer_type
        self._input = agreed
        self._route_names = route_names
        self._given = {"choose": given_choose, "draft": draft}
        _warn_if_retrieving_twice(gate, self.routes.get(RETRIEVE))

    def __repr__(self) -> str:
        return f"GatedRouter(gate={self.gate.get_name()!r}, routes={self._route_names}, choose={self.choose!r})"

    # ----------------------------------------------------------------- serialising
    def to_json(self) -> SerializedConstructor | SerializedNotImplemented:
        """The constructor's arguments: the gate, the routes, and the options not left
        at their defaults, as given (a ``ScoreBands`` as its bands)."""
        kwargs: dict[str, Any] = {"gate": self.gate, "routes": dict(self.routes)}
        if self._given["choose"] is not None:
            kwargs["choose"] = self._given["choose"]
        if self._given["draft"] != "auto":
            kwargs["draft"] = self._given["draft"]
        if self.include_decision:
            kwargs["include_decision"] = True
        return SerializedConstructor(lc=1, type="constructor", id=self.lc_id(), kwargs=kwargs)

    # ----------------------------------------------------------------- types
    @property
    def answer_type(self) -> Any:
        """The routes' common output type."""
        return self._answer_type

    @property
    def deps(self) -> list[Runnable]:
        """The gate and the routes."""
        return [self.gate, *self.routes.values()]

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        return get_unique_config_specs(spec for dep in self.deps for spec in dep.config_specs)

    def config_schema(self, *, include: Sequence[str] | None = None) -> type[BaseModel]:
        """LangChain's config schema, whose ``configurable`` refuses undeclared keys
        (a misspelt ``gate_`` key with a did-you-mean; see ``control.refusing_unknown_keys``)."""
        return refusing_unknown_keys(super().config_schema(include=include))

    @property
    def InputType(self) -> Any:
        """The input every route accepts (``branch_types.agreed_input``); the gate's when
        no route declares one."""
        return self.gate.InputType if self._input is None else self._input.annotation

    def get_input_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        return self.gate.get_input_schema(config) if self._input is None else self._input.schema

    @property
    def OutputType(self) -> Any:
        return dict[str, Any] if self.include_decision else self._answer_type

    def get_output_schema(self, config: RunnableConfig | None = None) -> TypeBaseModel:
        if not self.include_decision:
            return super().get_output_schema(config)
        return create_model_v2(self.get_name("Output"), field_definitions=decision_output_fields(self._answer_type))

    def get_graph(self, config: RunnableConfig | None = None) -> Graph:
        """The input, the router, a conditional edge named by each route to its node
        (named by the route too), and the output."""
        graph = Graph()
        source = graph.add_node(self.get_input_schema(config))
        router = graph.add_node(self)
        sink = graph.add_node(self.get_output_schema(config))
        graph.add_edge(source, router)
        for name in self._route_names:
            node = _renamed(graph, graph.add_node(self.routes.get(name)), name)  # the draft route has no runnable
            graph.add_edge(router, node, data=name, conditional=True)
            graph.add_edge(node, sink)
        return graph

    # ----------------------------------------------------------------- routing
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        run = get_callback_manager_for_config(config).on_chain_start(
            None, input, name=config.get("run_name") or self.get_name(), run_id=config.pop("run_id", None)
        )
        child = _child_config(config, run.get_child())
        # Runnables called without a config (a gate's chat model) run under the router.
        token = var_child_runnable_config.set(child)
        try:
            route, route_config = self._route(self.gate.invoke(input, child), child)
            output = route.invoke(input, route_config)
        except BaseException as exc:
            run.on_chain_error(exc)
            raise
        finally:
            var_child_runnable_config.reset(token)
        run.on_chain_end(output)
        return output

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        config = ensure_config(config)
        run = await get_async_callback_manager_for_config(config).on_chain_start(
            None, input, name=config.get("run_name") or self.get_name(), run_id=config.pop("run_id", None)
        )
        child = _child_config(config, run.get_child())
        token = var_child_runnable_config.set(child)
        try:
            route, route_config = self._route(await self.gate.ainvoke(input, child), child)
            output = await route.ainvoke(input, route_config)
        except BaseException as exc:
            await run.on_chain_error(exc)
            raise
        finally:
            var_child_runnable_config.reset(token)
        await run.on_chain_end(output)
        return output

    def stream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Iterator[Any]:
        # LangChain passes the config to a transformer whose parameter is named ``config``.
        route = self._stream_route
        yield from self._transform_stream_with_config(iter([input]), route, config)  # type: ignore[arg-type]

    async def astream(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> AsyncIterator[Any]:
        route = self._astream_route
        async for chunk in self._atransform_stream_with_config(_one(input), route, config):  # type: ignore[arg-type]
            yield chunk

    def _stream_route(self, inputs: Iterator[Any], config: RunnableConfig) -> Iterator[Any]:
        """The chosen route's stream (``inputs`` is the one input ``stream`` was given)."""
        [value] = inputs
        route, route_config = self._route(self.gate.invoke(value, config), config)
        yield from route.stream(value, route_config)

    async def _astream_route(self, inputs: AsyncIterator[Any], config: RunnableConfig) -> AsyncIterator[Any]:
        """``_stream_route`` on the event loop."""
        [value] = [x async for x in inputs]
        route, route_config = self._route(await self.gate.ainvoke(value, config), config)
        async for chunk in route.astream(value, route_config):
            yield chunk

    def _route(self, decision: GateDecision, config: RunnableConfig) -> tuple[Runnable, RunnableConfig]:
        """The route ``decision`` takes, with the config naming, tagging its run and
        putting the decision in its metadata."""
        name = checked_route(self.choose(decision), self._route_names)
        route = draft_route(self.draft, decision) if name == DRAFT and self.draft is not None else self.routes[name]
        decided = decision.to_dict()
        route_config: RunnableConfig = {
            **config,
            "run_name": f"{name}_branch",
            "tags": [*config.get("tags", ()), TAG_PREFIX + name, f"{TAG_PREFIX}gate:{decision.gate}"],
            "metadata": {**config.get("metadata", {}), METADATA_KEY: decided, ROUTE_METADATA_KEY: name},
        }
        return (WithDecision(route, decided, name) if self.include_decision else route), route_config

    # ----------------------------------------------------------------- batches
    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        def route_all(inputs: list[Any], config: list[RunnableConfig]) -> list[Any]:
            return self._route_all(inputs, config, return_exceptions=return_exceptions)

        return self._batch_with_config(
            route_all,  # type: ignore[arg-type]  # its annotation names the run-manager forms only
            list(inputs),
            config,
            return_exceptions=return_exceptions,
        )

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[Any]:
        async def route_all(inputs: list[Any], config: list[RunnableConfig]) -> list[Any]:
            return await self._aroute_all(inputs, config, return_exceptions=return_exceptions)

        return await self._abatch_with_config(
            route_all,  # type: ignore[arg-type]  # its annotation names the run-manager forms only
            list(inputs),
            config,
            return_exceptions=return_exceptions,
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
        return [
            self._answer(x, d, c, return_exceptions=return_exceptions) for x, d, c in zip(inputs, decisions, config)
        ]

    def _answer(
        self, value: Any, decision: GateDecision | Exception, config: RunnableConfig, *, return_exceptions: bool
    ) -> steps.Steps[Any]:
        if isinstance(decision, Exception):
            return decision
        try:
            route, route_config = self._route(decision, config)
            return (yield steps.Invoke(route, value, route_config))
        except Exception as exc:
            if return_exceptions:
                return exc
            raise


def gated_router(
    gate: Gate | GateRunnable | str | Path,
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

    ``gate`` may be the directory a gate was saved in (``Gate.save``): the gate is
    loaded from it (``SavedGateRunnable``), and the router's LangChain JSON
    (``langchain_core.load.dumps``) refers to that directory, so ``loads`` gives the
    router back.
    """
    if gate_options and isinstance(gate, GateRunnable):
        raise ValueError("gate options apply to a bare gate; configure the GateRunnable itself")
    gate_runnable = _gate_runnable(gate, gate_options)
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


def _gate_runnable(gate: Gate | GateRunnable | str | Path, options: dict[str, Any]) -> GateRunnable:
    """The router's gate runnable: the one given, or one over the gate given or saved
    in the directory given."""
    if isinstance(gate, GateRunnable):
        return gate
    if isinstance(gate, (str, Path)):
        return SavedGateRunnable(gate, **options)
    return GateRunnable(gate, **options)


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


def _child_config(config: RunnableConfig, callbacks: Any) -> RunnableConfig:
    """``config`` for a run under the router's (``patch_config(config, callbacks=...)``
    on a config already ensured): its callbacks, no run name of its own."""
    child = config.copy()
    child["callbacks"] = callbacks
    child.pop("run_name", None)
    return child


def _renamed(graph: Graph, node: Node, name: str) -> Node:
    """``node`` of ``graph`` drawn as ``name`` (its id stays unique when graphs merge)."""
    graph.nodes[node.id] = renamed = node.copy(name=name)
    return renamed


async def _one(value: Any) -> AsyncIterator[Any]:
    """``value`` as an async stream of one chunk."""
    yield value
