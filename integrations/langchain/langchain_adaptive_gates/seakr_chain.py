"""SeaKR end to end as a LangChain runnable (where LangChain users know ``FlareChain``):
retrieval decided step by step during multi-step reasoning by the LLM's self-aware
uncertainty, the retrieved snippets re-ranked by it, and the final answer selected by
it, over any LangChain retriever."""

from __future__ import annotations

import asyncio
import contextvars
import hashlib
import threading
from collections.abc import Mapping, Sequence
from typing import Any, Self

from langchain_core.documents import Document
from langchain_core.retrievers import BaseRetriever
from langchain_core.runnables import Runnable, RunnableConfig

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12
from typing_extensions import TypedDict

from adaptive_gates.extend import Hit

from .messages import INPUT_KEY_ALIAS, question_key

#: The documents one answer's searches returned, by hit id (each answer sets its own).
_FOUND: contextvars.ContextVar[dict[str, Document] | None] = contextvars.ContextVar("seakr_found", default=None)


class RetrieverSearch:
    """A LangChain retriever behind the core's retriever protocol
    (``search(query, k) -> list[Hit]``), so ``SeaKRPipeline`` can search with it.

    The retriever returns as many documents as it is configured to (set its ``k`` to
    at least the pipeline's ``n_candidates`` plus ``max_docs``, so read snippets can
    be skipped); the first ``k`` are the hits, scored by rank. A hit's id is the
    document's ``id``, else a digest of its text; its title is ``metadata["title"]``.
    Called inside a runnable, the retriever's run is a child of the caller's.
    """

    def __init__(self, retriever: BaseRetriever) -> None:
        if not isinstance(retriever, BaseRetriever):
            raise TypeError(f"retriever must be a LangChain BaseRetriever, got {type(retriever).__name__}")
        self.retriever = retriever

    def search(self, query: str, k: int = 3) -> list[Hit]:
        """The first ``k`` documents the retriever returns for ``query``, as hits."""
        if isinstance(k, bool) or not isinstance(k, int) or k < 1:
            raise ValueError(f"k must be a positive int, got {k!r}")
        documents = self.retriever.invoke(query)[:k]
        hits = [_hit(d, len(documents) - rank) for rank, d in enumerate(documents)]
        found = _FOUND.get()
        if found is not None:
            found.update((h.id, d) for h, d in zip(hits, documents))
        return hits

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]:
        """``search`` for each query."""
        return [self.search(q, k) for q in queries]


def _hit(document: Document, score: float) -> Hit:
    text = document.page_content
    identifier = document.id or hashlib.sha1(text.encode("utf-8")).hexdigest()[:16]
    return Hit(id=identifier, text=text, score=float(score), title=str(document.metadata.get("title", "")))


class SeaKRChain(Runnable[Any, dict[str, Any]]):
    """SeaKR's pipeline (``adaptive_gates.SeaKRPipeline``) as a runnable over a LangChain
    retriever.

    Input: a question (a string, or a dict with it under ``"question"``, else under
    ``"input"``; ``InputType`` describes both). Output: a
    dict with ``answer`` (the text), ``documents`` (the LangChain documents read, in
    order) and ``trace`` (the core's ``SeaKRResult`` as a dict: every step's
    uncertainty, query, re-ranked candidates and the selected route).

    Args:
        retriever: any LangChain retriever (see ``RetrieverSearch`` for its ``k``).
        **options: ``SeaKRPipeline``'s: ``lm``, ``uncertainty``, ``threshold`` (δ; the
            multi-hop mode needs it, or ``calibrate``), ``mode``, ``max_steps``,
            ``n_candidates``, ``max_docs``, ``step_tokens``, ``answer_tokens``…

    The pipeline runs the local model, so answers are computed one at a time; the
    async calls run it in a worker thread, and ``batch`` / ``abatch`` are LangChain's.
    A failing retriever is recorded on the step (``trace["steps"][i]["error"]``) and
    the question is still answered; an empty question raises ``ValueError``.
    """

    def __init__(self, retriever: BaseRetriever, **options: Any) -> None:
        from adaptive_gates import SeaKRPipeline  # heavy (scikit-learn's stop words): on first use

        self.retriever = retriever
        self.pipeline = SeaKRPipeline(RetrieverSearch(retriever), **options)
        self._lock = threading.Lock()  # one answer at a time: the LM's prefix cache is per question

    def get_name(self, suffix: str | None = None, *, name: str | None = None) -> str:
        return super().get_name(suffix, name=name or "seakr")

    @property
    def InputType(self) -> Any:
        """The question, or a dict with it under ``"question"`` or ``"input"``."""
        return str | SeaKRQuestion | SeaKRInput

    def calibrate(self, questions: Sequence[str], target_rate: float | None = None, **kwargs: Any) -> Self:
        """Set δ as ``SeaKRPipeline.calibrate`` does (e.g. for a ``target_rate`` of
        first steps that retrieve); returns this chain."""
        with self._lock:
            self.pipeline.calibrate(questions, target_rate, **kwargs)
        return self

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        return self._call_with_config(self._answer, input, config, run_type="chain")

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> dict[str, Any]:
        async def answer(value: Any) -> dict[str, Any]:
            # to_thread carries the run's context, so the retriever's runs stay its children
            return await asyncio.to_thread(self._answer, value)

        return await self._acall_with_config(answer, input, config, run_type="chain")

    def _answer(self, value: Any) -> dict[str, Any]:
        question = _question(value)
        token = _FOUND.set({})
        try:
            with self._lock:
                result = self.pipeline.answer(question)
            found = _FOUND.get() or {}
        finally:
            _FOUND.reset(token)
        return {"answer": result.answer, "documents": [found[i] for i in result.documents], "trace": result.to_dict()}


class SeaKRQuestion(TypedDict):
    """A dict with the question under ``"question"``."""

    question: str


class SeaKRInput(TypedDict):
    """A dict with the question under ``"input"``."""

    input: str


def _question(value: Any) -> Any:
    if isinstance(value, Mapping):
        key = question_key(value, "question")
        if key is None:
            raise ValueError(
                f"the input dict has no 'question' or {INPUT_KEY_ALIAS!r} key (keys: {sorted(map(str, value))})"
            )
        return value[key]
    return value
