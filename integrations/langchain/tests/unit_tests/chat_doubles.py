"""Chat models at the system edge: one that fails like an unreachable API, and one
whose replies are scripted (for the decision branches that depend on a reply's words)."""

from __future__ import annotations

from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import BaseMessage
from langchain_core.outputs import ChatResult


class UnreachableChatModel(BaseChatModel):
    """Fails every call as a chat API that cannot be reached does (``error``, a
    ``ConnectionError`` by default); counts the calls."""

    calls: int = 0
    error: Exception = ConnectionError("connection refused")

    @property
    def _llm_type(self) -> str:
        return "unreachable"

    def _generate(
        self, messages: list[BaseMessage], stop: Any = None, run_manager: Any = None, **kwargs: Any
    ) -> ChatResult:
        self.calls += 1
        raise self.error


def scripted(*replies: str) -> GenericFakeChatModel:
    """LangChain's own fake chat model, replying with ``replies`` in turn."""
    return GenericFakeChatModel(messages=iter(replies))
