"""The core's ``ChatModel`` over a framework's chat model (LangChain, LlamaIndex, ...).

The integration packages give it the framework's blocking and async calls and the
conversion of its reply; it adds what the gates rely on: checked messages and options
(``ChatOptions``), the call options by OpenAI's names (each group can be turned off), a model id,
and one ``BackendError`` for every way the model can fail, a ``BackendUnavailableError``
when it gives no answer at all.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, Unpack

from ...errors import BackendError, BackendUnavailableError
from .base import ChatOptions, ChatReply, ResolvedChatOptions, check_messages
from .unavailable import is_unavailable


class AdaptedChatModel(ABC):
    """A ``ChatModel`` whose replies come from a framework's chat model ``llm``.

    Options go with each call as keyword arguments, by OpenAI's names: ``max_tokens``
    and ``temperature`` (``pass_options``), and ``logprobs=True, top_logprobs=n`` when
    the gate asks for alternatives (``request_logprobs``). A model that refuses them
    fails with a ``BackendError`` saying which switch to turn off.

    A failing model raises ``BackendError``; one that times out or cannot be reached
    raises ``BackendUnavailableError``, so a gate stops sending it the rest of a batch.
    That covers Python's ``TimeoutError`` and ``ConnectionError`` and the provider SDKs'
    own (``openai.APITimeoutError``, ``openai.APIConnectionError``, httpx's transport
    errors), also when the framework wraps them (see ``is_unavailable``). Malformed
    ``messages`` or options (``ChatOptions``) are the caller's mistake and raise
    ``ValueError`` before the model is asked.

    Subclasses supply ``_send`` / ``_asend`` (the framework's calls), ``_reply`` (its
    response as a ``ChatReply``) and ``_default_model_id``.

    Args:
        llm: the framework's chat model.
        model_id: the id recorded with saved gates (default: ``_default_model_id()``).
        pass_options: send ``max_tokens`` and ``temperature`` with each call (turn off
            for a model that refuses them; its own settings then apply).
        request_logprobs: also send ``logprobs=True, top_logprobs=n`` when the gate asks
            for alternatives (turn off for a model that refuses them).
    """

    def __init__(
        self, llm: Any, *, model_id: str | None = None, pass_options: bool = True, request_logprobs: bool = True
    ) -> None:
        self.llm = llm
        self._model_id = model_id
        self.pass_options = pass_options
        self.request_logprobs = request_logprobs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.llm).__name__}, model_id={self.model_id!r})"

    @property
    def model_id(self) -> str:
        """The given id, else the one the framework's model names."""
        return self._model_id or self._default_model_id()

    @abstractmethod
    def _default_model_id(self) -> str:
        """The id the framework's model gives itself (read at each use: it may change)."""

    @abstractmethod
    def _send(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> Any:
        """The framework's blocking call; returns its response."""

    @abstractmethod
    async def _asend(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> Any:
        """The framework's async call, without blocking the event loop."""

    @abstractmethod
    def _reply(self, response: Any, top_logprobs: int, stops: list[str]) -> ChatReply:
        """The framework's response as a ``ChatReply``."""

    def chat(self, messages: Sequence[Mapping[str, str]], **options: Unpack[ChatOptions]) -> ChatReply:
        """One assistant reply; a failing model raises ``BackendError``, malformed
        ``messages`` or options a ``ValueError``."""
        asked, turns = ResolvedChatOptions(**options), check_messages(messages)
        stops, sent = list(asked.stops), self._call_options(asked)
        try:
            response = self._send(turns, stops, sent)
        except Exception as exc:
            raise self._failure(exc, sent) from exc
        return self._reply(response, asked.top_logprobs, stops)

    async def achat(self, messages: Sequence[Mapping[str, str]], **options: Unpack[ChatOptions]) -> ChatReply:
        """``chat`` through the model's async path."""
        asked, turns = ResolvedChatOptions(**options), check_messages(messages)
        stops, sent = list(asked.stops), self._call_options(asked)
        try:
            response = await self._asend(turns, stops, sent)
        except Exception as exc:
            raise self._failure(exc, sent) from exc
        return self._reply(response, asked.top_logprobs, stops)

    def _call_options(self, asked: ResolvedChatOptions) -> dict[str, Any]:
        """The options sent to the framework's model, by OpenAI's names."""
        options: dict[str, Any] = {}
        if self.pass_options:
            options.update(max_tokens=asked.max_tokens, temperature=asked.temperature)
        if self.request_logprobs and asked.top_logprobs > 0:
            options.update(logprobs=True, top_logprobs=asked.top_logprobs)
        return options

    def _failure(self, exc: Exception, options: dict[str, Any]) -> BackendError:
        message = f"{self.model_id} failed: {type(exc).__name__}: {exc}"
        if is_unavailable(exc):
            # Not answering at all: the gates then stop sending the rest of a batch.
            return BackendUnavailableError(message)
        if isinstance(exc, TypeError) and options:
            # The usual reason a framework's model raises TypeError on a call: a keyword it does not take.
            message += (
                f" (if it refuses the call options {sorted(options)}, build "
                f"{type(self).__name__}(llm, pass_options=False, request_logprobs=False))"
            )
        return BackendError(message)
