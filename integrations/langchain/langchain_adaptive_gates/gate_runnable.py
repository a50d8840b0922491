"""A gate as a LangChain runnable: input -> ``GateDecision``."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Sequence
from typing import Any

from langchain_core.messages import BaseMessage
from langchain_core.runnables import (
    ConfigurableFieldSpec,
    Runnable,
    RunnableConfig,
    RunnableLambda,
    RunnableSerializable,
)
from langchain_core.runnables.utils import get_unique_config_specs
from pydantic import BaseModel, ConfigDict, Field, field_validator

from adaptive_gates import Gate, GateDecision
from adaptive_gates.extend import notify_decisions

from . import steps
from .control import RequestControl, control_specs, refusing_unknown_keys
from .decision_schema import decision_json_model
from .event_names import DECISION_EVENT as DECISION_EVENT  # where the package has always exported it
from .event_names import GateEventsInNames
from .history import standalone_from_history
from .llm_events import LLM_CALL_EVENT
from .messages import UnreadableInputError, conversation_of, input_type

logger = logging.getLogger(__name__)


class GateRunnable(GateEventsInNames, RunnableSerializable[Any, GateDecision]):
    """Any core gate as a runnable from a question to its ``GateDecision``.

    The input may be the question (a string), a message list (the last human turn is
    the question, the turns before it the chat history), or a dict with the question
    (or a message list) under ``input_key`` and optionally the chat history under
    ``history_key`` (``InputType`` and ``get_input_schema()`` describe these forms).
    With ``history_window > 0`` a follow-up is judged after as many of the last
    ``history_window`` human questions as it leans on (``adaptive_gates.answering.history_window``:
    "And when did he die?" after "Who wrote Hamlet?"; a question that stands alone is
    judged alone); with ``condense`` (e.g.
    ``condense_question_chain(llm)``) it judges the follow-up rewritten as a
    standalone question.

    ``batch``/``abatch`` decide all inputs in one ``decide_batch`` call; the async
    paths await the core's ``adecide_batch`` (natively async for chat-backed gates),
    so no model work blocks the event loop. Every decision is dispatched as the custom
    event ``DECISION_EVENT`` with the decision as a dict, so ``astream_events`` and
    tracers see it (``astream_events(include_names=[its name])`` too, see
    ``event_names``); before it, each request the gate sent its chat model is dispatched
    as ``LLM_CALL_EVENT`` (see ``llm_events``) to the run of the question it asked
    about.

    Bad input never raises: an input that holds no question (a dict without
    ``input_key``, a message list without a human message) or a question the gate
    refuses (empty, not a string, ``None``) gets the gate's fallback decision
    (retrieve, by default), with ``error`` saying what was wrong, logged as a warning;
    so does a failing model, and a gate that raises anything else (the exception as
    ``error``). A gate that cannot decide at all raises, as in every door
    (``adaptive_gates.extend.decide_or_fallback``): ``NotFittedError`` for one not
    fitted or loaded, ``BackendMisconfiguredError`` for a backend that cannot serve
    it. Per-request control comes from ``configurable`` (see
    ``langchain_adaptive_gates.control``; ``config_specs`` declares its keys); a bad
    control value or an unknown ``gate_`` key is a programming error and raises
    ``ValueError``. ``alternatives`` are the other gates a request may pick by name.

    As the condition of a ``RunnableBranch``: ``RunnableBranch((gate.as_condition(),
    rag_chain), direct_chain)``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    gate: Any
    alternatives: dict[str, Any] = Field(default_factory=dict)
    input_key: str = "question"
    history_key: str = "chat_history"
    history_window: int = Field(default=0, ge=0)
    condense: Runnable | None = None

    def __init__(self, gate: Gate, **kwargs: Any) -> None:
        # a field of this model; mypy reads the parent model's generated __init__
        super().__init__(gate=gate, **kwargs)  # type: ignore[call-arg]

    @field_validator("gate")
    @classmethod
    def _check_gate(cls, gate: Any) -> Any:
        if not isinstance(gate, Gate):
            raise ValueError(f"gate must be an adaptive_gates Gate, got {type(gate).__name__}")
        return gate

    @field_validator("alternatives")
    @classmethod
    def _check_alternatives(cls, gates: dict[str, Any]) -> dict[str, Any]:
        for name, gate in gates.items():
            if not isinstance(gate, Gate):
                raise ValueError(f"alternative {name!r} must be an adaptive_gates Gate, got {type(gate).__name__}")
        return gates

    @property
    def gates(self) -> dict[str, Gate]:
        """The gates a request can pick by name (the main gate under its own name)."""
        return {self.gate.name: self.gate, **self.alternatives}

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return super().get_name(suffix, name=name or f"gate:{self.gate.name}")

    @property
    def InputType(self) -> Any:
        """A question (``str``), a message list, or a dict with the question under
        ``input_key`` (and optionally the history under ``history_key``)."""
        return input_type(self.input_key, self.history_key)

    def get_output_schema(self, config: RunnableConfig | None = None) -> type[BaseModel]:
        """The decision as JSON carries it (``GateDecision.to_dict``: a forced or
        fallback decision's ``score`` and ``threshold`` are ``null``)."""
        return decision_json_model()

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """The control keys (``control_specs``; ``gate_name`` one of ``gates``) and what
        the condenser declares, since it runs with the request's config."""
        own = control_specs(list(self.gates), self.gate.name)
        return get_unique_config_specs([*own, *(self.condense.config_specs if self.condense else [])])

    def config_schema(self, *, include: Sequence[str] | None = None) -> type[BaseModel]:
        """LangChain's config schema, whose ``configurable`` refuses undeclared keys
        (a misspelt ``gate_`` key with a did-you-mean; see ``control.refusing_unknown_keys``)."""
        return refusing_unknown_keys(super().config_schema(include=include))

    def as_condition(self) -> Runnable[Any, bool]:
        """This gate as a ``RunnableBranch`` condition: true when the decision is to
        retrieve (a ``GateDecision`` itself is always truthy)."""
        return self | RunnableLambda(_retrieves, name="retrieve?")

    # ----------------------------------------------------------------- runnable API
    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> GateDecision:
        return self.batch([input], config, **kwargs)[0]

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> GateDecision:
        return (await self.abatch([input], config, **kwargs))[0]

    def batch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[GateDecision]:
        return self._batch_with_config(
            lambda xs, config: steps.run(self._decisions(xs, config)),
            list(inputs),
            config,
            return_exceptions=return_exceptions,
            run_type="chain",
        )

    async def abatch(
        self,
        inputs: list[Any],
        config: RunnableConfig | list[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[GateDecision]:
        # LangChain passes each input's config to a function whose parameter is named ``config``.
        async def decide(xs: list[Any], config: list[RunnableConfig]) -> list[GateDecision | Exception]:
            return await steps.arun(self._decisions(xs, config))

        return await self._abatch_with_config(
            decide,  # type: ignore[arg-type]  # its annotation names the run-manager forms only
            list(inputs),
            config,
            return_exceptions=return_exceptions,
            run_type="chain",
        )

    # ----------------------------------------------------------------- decisions
    def _decisions(
        self, inputs: list[Any], config: list[RunnableConfig]
    ) -> steps.Steps[list[GateDecision | Exception]]:
        """Each input's decision (or the exception its bad control raised), written
        once for both paths (``steps``): condense the follow-ups, decide each gate's
        share in one batch, send the events."""
        requests = [self._request(x, c) for x, c in zip(inputs, config)]
        condense = self.condense
        for request, cfg in zip(requests, config):
            # a request needs condensing only when there is a condenser
            if isinstance(request, _Request) and request.needs_condensing and condense is not None:
                try:
                    request.condensed((yield steps.Invoke(condense, request.condense_input, cfg)))
                except Exception as exc:  # a failing condenser must not take the chain down
                    request.condensed(exc)
        for gate, members in _groups(requests):
            decisions, calls = yield steps.Decide(gate, [r.text for r in members])
            for request, decision in zip(members, decisions):
                request.decision = decision
            for owners, payload in calls.by_question([r.text for r in members]):
                for i in owners:
                    yield steps.Dispatch(LLM_CALL_EVENT, payload, members[i].config)
        results = [_result(r) for r in requests]
        for result, cfg in zip(results, config):
            if isinstance(result, GateDecision):
                yield steps.Dispatch(DECISION_EVENT, result.to_dict(), cfg)
        return results

    def _request(self, value: Any, config: RunnableConfig) -> _Request | Exception:
        """What one input asks: the gate, the text it judges, and the request's control.
        A bad control becomes that input's exception; an input with no question in it,
        the gate's fallback decision."""
        try:
            control = RequestControl.from_config(config)
            gate = self._gate_named(control.gate_name)
            control = control.for_gate(gate)
        except ValueError as exc:
            return exc
        try:
            question, history = conversation_of(value, input_key=self.input_key, history_key=self.history_key)
        except UnreadableInputError as exc:
            return _Request(gate, control, value, [], config, unreadable=str(exc))
        request = _Request(gate, control, question, history, config)
        if not isinstance(question, str) or not question.strip() or not history:
            # the gate itself refuses a bad question with a fallback; history must not
            # stand in for a missing question
            request.text = question
        else:
            request.text = standalone_from_history(question, history, self.history_window)
            if self.condense is not None:
                window = history[-self.history_window :] if self.history_window else history
                request.condense_input = {"chat_history": window, "question": question}
        return request

    def _gate_named(self, name: str | None) -> Gate:
        if name is None:
            return self.gate
        gates = self.gates
        if name not in gates:
            raise ValueError(f"no gate named {name!r} is registered; known: {sorted(gates)}")
        return gates[name]


def _retrieves(decision: GateDecision) -> bool:
    return decision.retrieve


class _Request:
    """One input on its way to a decision."""

    def __init__(
        self,
        gate: Gate,
        control: RequestControl,
        question: Any,
        history: list[BaseMessage],
        config: RunnableConfig,
        *,
        unreadable: str | None = None,
    ) -> None:
        self.gate = gate
        self.config = config
        self.control = control
        self.text: Any = question
        self.history = history
        self.condense_input: dict[str, Any] | None = None
        self.condense_error: str | None = None
        self.decision: GateDecision | None = None
        if control.retrieval != "auto":
            self.decision = control.forced(question, gate.name)
        elif unreadable is not None:
            self.decision = _unreadable_fallback(gate, question, unreadable)

    @property
    def needs_condensing(self) -> bool:
        return self.condense_input is not None and self.decision is None

    def condensed(self, output: Any) -> None:
        """Judge the condenser's standalone question; if it failed or gave no text, keep
        the windowed question and record why in the decision's evidence."""
        text = output.text if isinstance(output, BaseMessage) else output
        if isinstance(text, str) and text.strip():
            self.text = text.strip()
            return
        reason = f"{type(output).__name__}: {output}" if isinstance(output, Exception) else f"no text ({text!r})"
        logger.warning("condensing the follow-up failed (%s); judging the windowed question", reason)
        self.condense_error = reason


def _unreadable_fallback(gate: Gate, value: Any, reason: str) -> GateDecision:
    """The fallback ``gate`` gives a question it cannot judge, for an input that holds
    none: its threshold, a warning logged, its listeners told, as in its own batches."""
    decision = gate.fallback_decision(value, f"invalid input: {reason}", gate.threshold_)
    notify_decisions([decision], gate.listeners)
    return decision


def _groups(requests: Sequence[_Request | Exception]) -> list[tuple[Gate, list[_Request]]]:
    """Undecided requests grouped by gate, so each gate scores its share in one batch."""
    groups: dict[int, tuple[Gate, list[_Request]]] = {}
    for request in requests:
        if isinstance(request, _Request) and request.decision is None:
            groups.setdefault(id(request.gate), (request.gate, []))[1].append(request)
    return list(groups.values())


def _result(request: _Request | Exception) -> GateDecision | Exception:
    if isinstance(request, Exception):
        return request
    assert request.decision is not None
    decision = request.control.apply_threshold(request.decision, request.gate)
    if request.condense_error is not None:
        decision = dataclasses.replace(decision, details={**decision.details, "condense_error": request.condense_error})
    return decision
