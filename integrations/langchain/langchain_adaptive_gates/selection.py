"""SeaKR's reasoning selector as a runnable: candidate answers in, the chosen one out."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, NotRequired

from langchain_core.runnables import RunnableConfig, RunnableSerializable
from pydantic import ConfigDict, Field, InstanceOf, PrivateAttr

# pydantic reads a TypedDict from typing_extensions only, before Python 3.12
from typing_extensions import TypedDict

from adaptive_gates import AnswerCandidate, ReasoningSelector, Selection


class CandidateDict(TypedDict):
    """An ``AnswerCandidate`` as a dict (no other keys)."""

    __pydantic_config__ = ConfigDict(extra="forbid")  # type: ignore[misc]  # pydantic's way for a TypedDict

    answer: str | None
    prompt: NotRequired[str | None]
    uncertainty: NotRequired[float | None]
    name: NotRequired[str]


class AnswerSelector(RunnableSerializable[Sequence[Any], Selection]):
    """Chooses among candidate final answers the one whose context leaves the LLM
    least uncertain (SeaKR's self-aware reasoning), with SeaKR's fallbacks for missing
    or "unknown" answers.

    Input: a list of ``AnswerCandidate`` or dicts with the same keys (``answer``,
    ``prompt``, ``uncertainty``, ``name``). Output: the core's ``Selection``.
    Async calls run the sampling in a worker thread.

    Args:
        selector: the core's ``ReasoningSelector`` (SeaKR's settings on the embedded LM
            when omitted).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    selector: Any = Field(default=None, exclude=True)

    _selector: ReasoningSelector | None = PrivateAttr(default=None)

    @property
    def InputType(self) -> Any:
        """A list of ``AnswerCandidate`` (the instances themselves) or ``CandidateDict``."""
        return list[InstanceOf[AnswerCandidate] | CandidateDict]

    @property
    def reasoning_selector(self) -> ReasoningSelector:
        if self._selector is None:
            selector = self.selector if self.selector is not None else ReasoningSelector()
            if not isinstance(selector, ReasoningSelector):
                raise TypeError(f"selector must be a ReasoningSelector, got {type(selector).__name__}")
            self._selector = selector
        return self._selector

    def _select(self, candidates: Sequence[Any]) -> Selection:
        return self.reasoning_selector.select([_candidate(c, i) for i, c in enumerate(candidates)])

    def invoke(self, input: Sequence[Any], config: RunnableConfig | None = None, **kwargs: Any) -> Selection:
        return self._call_with_config(self._select, input, config, run_type="chain")

    async def ainvoke(self, input: Sequence[Any], config: RunnableConfig | None = None, **kwargs: Any) -> Selection:
        async def select(candidates: Sequence[Any]) -> Selection:
            return await asyncio.to_thread(self._select, candidates)

        return await self._acall_with_config(select, input, config, run_type="chain")


def _candidate(value: Any, index: int) -> AnswerCandidate:
    if isinstance(value, AnswerCandidate):
        return value
    if isinstance(value, Mapping):
        unknown = set(value) - {"answer", "prompt", "uncertainty", "name"}
        if unknown:
            raise ValueError(f"candidate {index} has unknown keys {sorted(unknown)}")
        return AnswerCandidate(**value)
    raise ValueError(f"candidate {index} must be an AnswerCandidate or a dict, got {type(value).__name__}")
