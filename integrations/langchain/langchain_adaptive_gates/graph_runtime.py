"""A gate node's share of LangGraph's run-time: the gate control a run gives in its
``context`` (LangGraph 1.x's ``Runtime``), and the decision written to the graph's
custom stream (``stream_mode="custom"``).

langgraph is imported on first use, leaving the package importable without the
``langgraph`` extra; a node invoked on its own, outside a graph's run, has neither.

.. code-block:: python

    app.invoke({"question": q}, context={"gate_retrieval": "always"})
    for chunk in app.stream({"question": q}, stream_mode="custom"):
        decision = chunk[DECISION_EVENT]
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, NotRequired

from langchain_core.runnables import RunnableConfig
from langchain_core.runnables.config import merge_configs
from pydantic import Field

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12
from typing_extensions import TypedDict

from .control import CONTROL_KEYS, KEY_PREFIX, control_specs

_SPECS = {spec.id: spec for spec in control_specs(["any"], "any")}


def _context_field(key: str, annotation: Any = None) -> Any:
    spec = _SPECS[key]
    return NotRequired[Annotated[annotation or spec.annotation, Field(description=spec.description)]]


#: A run's gate control in LangGraph's ``context`` (the ``configurable`` keys of
#: ``langchain_adaptive_gates.control``, each optional); a graph's own context schema
#: may extend it.
GateContext = TypedDict(  # type: ignore[misc]  # the keys are the control module's constants
    "GateContext",
    {key: _context_field(key, str | None if key == "gate_name" else None) for key in CONTROL_KEYS},
)
GateContext.__doc__ = "Per-run gate control: the control keys of ``configurable``, each optional."


def with_run_context(config: RunnableConfig) -> RunnableConfig:
    """``config`` with the gate control the run's LangGraph context gives merged into
    its ``configurable`` (the context's value wins over ``configurable``'s). A context
    of any type is read: a mapping by its ``gate_`` keys (so a misspelt one is refused
    as in ``configurable``), an object by the control keys' attributes."""
    runtime = _runtime()
    control = _control_in(runtime.context) if runtime is not None else {}
    return merge_configs(config, {"configurable": control}) if control else config


def write_decision(event: str, decision: dict[str, Any]) -> None:
    """Write ``{event: decision}`` to the graph's custom stream (``stream_mode="custom"``)."""
    runtime = _runtime()
    if runtime is not None:
        runtime.stream_writer({event: decision})


def _runtime() -> Any:
    """The graph run's ``Runtime``, or ``None`` for a node invoked on its own."""
    try:
        from langgraph.runtime import get_runtime

        return get_runtime()
    except (ImportError, RuntimeError, KeyError):  # no langgraph, no runnable context, no graph run
        return None


def _control_in(context: Any) -> dict[str, Any]:
    if context is None:
        return {}
    if isinstance(context, Mapping):
        pairs = [(k, v) for k, v in context.items() if isinstance(k, str) and k.startswith(KEY_PREFIX)]
    else:
        pairs = [(key, getattr(context, key, None)) for key in CONTROL_KEYS]
    return {key: value for key, value in pairs if value is not None}
