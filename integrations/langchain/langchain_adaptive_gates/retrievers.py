"""A retriever that retrieves only when the gate says the model needs it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForRetrieverRun, CallbackManagerForRetrieverRun
from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import ConfigurableFieldSpec, Runnable, RunnableConfig, ensure_config
from langchain_core.runnables.utils import get_unique_config_specs
from pydantic import BaseModel, ConfigDict, Field, field_validator

from adaptive_gates import Gate, GateDecision

from .control import refusing_unknown_keys
from .gate_runnable import GateRunnable
from .passages import decision_documents

#: Metadata key of each returned document holding the decision (as a dict).
DOCUMENT_DECISION_KEY = "gate_decision"


@dataclass(frozen=True)
class GatedDocuments:
    """What ``GatedRetriever.retrieve`` returns: the documents and the decision."""

    documents: list[Document]
    decision: GateDecision


class GatedRetriever(BaseRetriever):
    """Wraps any retriever; returns no documents when the gate says the model knows.

    A gate that retrieved to decide (a draft-check gate, whose decision keeps the
    passages it checked) is not followed by a second retrieval: a retrieving decision
    with passages returns them as documents (``decision_documents``: metadata ``id``,
    ``title``, ``score``) and ``retriever`` is not called.

    Where the decision can be read:

    - ``retrieve(query)`` / ``aretrieve(query)`` return the documents with the decision;
    - every call dispatches it as the custom event ``DECISION_EVENT`` (the gate's run
      is a child of the retriever's), so callbacks and ``astream_events`` see it;
    - each returned document carries it under ``metadata["gate_decision"]``.

    ``gate`` is a core gate or a configured ``GateRunnable``. Per-request control
    comes from the call's ``configurable`` as for the router (``gate_threshold``,
    ``gate_retrieval``, ``gate_name``, ``gate_target_rate``), also inside a chain that
    passes its config on; ``config_specs`` declares those keys and the wrapped
    retriever's own.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True, extra="forbid")

    retriever: Runnable
    gate: GateRunnable
    k: int | None = Field(default=None, ge=1)
    """Most documents returned (``None``: all the wrapped retriever gives); a call's
    ``k=`` overrides it."""

    @field_validator("gate", mode="before")
    @classmethod
    def _as_runnable(cls, gate: Any) -> GateRunnable:
        if isinstance(gate, GateRunnable):
            return gate
        if isinstance(gate, Gate):
            return GateRunnable(gate)
        raise ValueError(f"gate must be an adaptive_gates Gate or a GateRunnable, got {type(gate).__name__}")

    @property
    def config_specs(self) -> list[ConfigurableFieldSpec]:
        """The gate's control keys and what the wrapped retriever declares: both run
        with the call's config."""
        return get_unique_config_specs([*self.gate.config_specs, *self.retriever.config_specs])

    def config_schema(self, *, include: Sequence[str] | None = None) -> type[BaseModel]:
        """LangChain's config schema, whose ``configurable`` refuses undeclared keys
        (a misspelt ``gate_`` key with a did-you-mean; see ``control.refusing_unknown_keys``)."""
        return refusing_unknown_keys(super().config_schema(include=include))

    def retrieve(self, query: str, config: RunnableConfig | None = None) -> GatedDocuments:
        """The documents (none when the model knows) and the decision that chose them."""
        # _call_with_config returns what its function returns, passing config= to a function
        # with that parameter; its annotation ties it to the retriever's own output type.
        return self._call_with_config(self._gated, query, config, run_type="retriever")  # type: ignore[arg-type, return-value]

    async def aretrieve(self, query: str, config: RunnableConfig | None = None) -> GatedDocuments:
        """``retrieve`` on the async path."""
        # as in retrieve
        return await self._acall_with_config(self._agated, query, config, run_type="retriever")  # type: ignore[arg-type, return-value]

    def _gated(self, query: str, config: RunnableConfig, k: int | None = None) -> GatedDocuments:
        decision = self.gate.invoke(query, config)
        documents = decision_documents(decision)
        if documents is None:
            documents = self.retriever.invoke(query, config) if decision.retrieve else []
        return GatedDocuments(_stamped(documents[: k or self.k], decision), decision)

    async def _agated(self, query: str, config: RunnableConfig, k: int | None = None) -> GatedDocuments:
        decision = await self.gate.ainvoke(query, config)
        documents = decision_documents(decision)
        if documents is None:
            documents = await self.retriever.ainvoke(query, config) if decision.retrieve else []
        return GatedDocuments(_stamped(documents[: k or self.k], decision), decision)

    # BaseRetriever hands _get_relevant_documents a run manager but not the config:
    # the request's ``configurable`` is passed along as a keyword.
    def invoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        return super().invoke(input, config, configurable=_configurable(config), **kwargs)

    async def ainvoke(self, input: str, config: RunnableConfig | None = None, **kwargs: Any) -> list[Document]:
        return await super().ainvoke(input, config, configurable=_configurable(config), **kwargs)

    def _get_relevant_documents(
        self,
        query: str,
        *,
        run_manager: CallbackManagerForRetrieverRun,
        k: int | None = None,
        configurable: dict[str, Any] | None = None,
    ) -> list[Document]:
        config: RunnableConfig = {"callbacks": run_manager.get_child(), "configurable": configurable or {}}
        return self._gated(query, config, k).documents

    async def _aget_relevant_documents(
        self,
        query: str,
        *,
        run_manager: AsyncCallbackManagerForRetrieverRun,
        k: int | None = None,
        configurable: dict[str, Any] | None = None,
    ) -> list[Document]:
        config: RunnableConfig = {"callbacks": run_manager.get_child(), "configurable": configurable or {}}
        return (await self._agated(query, config, k)).documents


def _configurable(config: RunnableConfig | None) -> dict[str, Any]:
    return dict(ensure_config(config).get("configurable") or {})


def _stamped(documents: list[Document], decision: GateDecision) -> list[Document]:
    payload = decision.to_dict()
    return [
        Document(page_content=d.page_content, metadata={**d.metadata, DOCUMENT_DECISION_KEY: payload}, id=d.id)
        for d in documents
    ]
