"""Any LlamaIndex LLM as the core's ``ChatModel``, so it can stand behind the
verbalized-confidence and SKR-prompt gates."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Mapping, Sequence
from typing import Any

from adaptive_gates import BackendError, BackendUnavailableError
from adaptive_gates.models import ChatReply, TokenLogprob
from adaptive_gates.models.chat import check_messages
from adaptive_gates.models.generation import first_stop
from adaptive_gates.validation import check_stops
from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import ChatResponse, LogProb
from llama_index.core.llms.custom import CustomLLM

from .messages import from_core_messages

#: LlamaIndex's placeholder when an LLM does not name its model.
_UNNAMED = "unknown"


class LlamaIndexChatModel:
    """The core's chat protocol (``chat(messages, ...) -> ChatReply``) over a LlamaIndex
    LLM.

    Options go with each call as keyword arguments, by OpenAI's names (``max_tokens``,
    ``temperature``; ``logprobs=True, top_logprobs=n`` when the gate asks for
    alternatives): LlamaIndex's OpenAI LLM and ``AdaptiveGatesLLM`` take them. Per-call
    options are model-specific, so both groups can be turned off; a model that refuses
    them fails with a ``BackendError`` saying which switch to turn off. Stop strings are
    applied to the reply here (LlamaIndex has no common name for them).

    Token log-probabilities are used when the response carries them
    (``ChatResponse.logprobs``, one list per generated token): the verbalized gate then
    scores P(uncertain) instead of the bare word. The first entry of each list is
    taken as the token chosen and the whole list as its alternatives. That holds for
    ``AdaptiveGatesLLM`` (chosen token first, then the alternatives) and for greedy
    decoding by LlamaIndex's OpenAI LLM (the top log-probs, best first, whose first is
    then the chosen token); the gates decode greedily.

    Async calls use the LLM's own ``achat``. A ``CustomLLM`` that does not override it
    would answer ``achat`` by running its blocking ``chat`` on the event loop, so for
    one ``chat`` runs in a worker thread instead.

    A failing LLM raises ``BackendError``; one that times out or cannot be reached
    (``TimeoutError``, ``ConnectionError``) raises ``BackendUnavailableError``, so a
    gate stops sending it the rest of a batch.

    Args:
        llm: the LlamaIndex LLM.
        model_id: the id recorded with saved gates (default: ``llm.metadata.model_name``).
        pass_options: send ``max_tokens`` and ``temperature`` with each call (turn off
            for a model that refuses them; its own settings then apply).
        request_logprobs: also send ``logprobs=True, top_logprobs=n`` when the gate asks
            for alternatives (turn off for a model that refuses them).
    """

    def __init__(
        self,
        llm: BaseLLM,
        *,
        model_id: str | None = None,
        pass_options: bool = True,
        request_logprobs: bool = True,
    ) -> None:
        if not isinstance(llm, BaseLLM):
            raise TypeError(f"llm must be a LlamaIndex LLM, got {type(llm).__name__}")
        self.llm = llm
        self._model_id = model_id
        self.pass_options = pass_options
        self.request_logprobs = request_logprobs

    def __repr__(self) -> str:
        return f"{type(self).__name__}({type(self.llm).__name__}, model_id={self.model_id!r})"

    @property
    def model_id(self) -> str:
        """The given id, else the LLM's ``metadata.model_name``, else its type."""
        if self._model_id:
            return self._model_id
        name = self.llm.metadata.model_name
        return name if name and name != _UNNAMED else f"llama-index:{type(self.llm).__name__}"

    def _call_options(self, max_tokens: int, temperature: float, top_logprobs: int) -> dict[str, Any]:
        options: dict[str, Any] = {}
        if self.pass_options:
            options.update(max_tokens=max_tokens, temperature=temperature)
        if self.request_logprobs and top_logprobs > 0:
            options.update(logprobs=True, top_logprobs=top_logprobs)
        return options

    def chat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply:
        """One assistant reply; a failing LLM raises ``BackendError``, malformed
        ``messages`` or ``stop`` a ``ValueError``."""
        stops, turns = check_stops(stop), from_core_messages(check_messages(messages))
        options = self._call_options(max_tokens, temperature, top_logprobs)
        try:
            response = self.llm.chat(turns, **options)
        except Exception as exc:
            raise self._failure(exc, options) from exc
        return to_chat_reply(response, top_logprobs, stops)

    async def achat(
        self,
        messages: Sequence[Mapping[str, str]],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply:
        """``chat`` through the LLM's own async path (in a worker thread for a
        ``CustomLLM`` whose async path is its blocking one)."""
        if _achat_blocks(self.llm):
            return await asyncio.to_thread(
                self.chat, messages, max_tokens=max_tokens, temperature=temperature, top_logprobs=top_logprobs, stop=stop
            )
        stops, turns = check_stops(stop), from_core_messages(check_messages(messages))
        options = self._call_options(max_tokens, temperature, top_logprobs)
        try:
            response = await self.llm.achat(turns, **options)
        except Exception as exc:
            raise self._failure(exc, options) from exc
        return to_chat_reply(response, top_logprobs, stops)

    def _failure(self, exc: Exception, options: dict[str, Any]) -> BackendError:
        message = f"{self.model_id} failed: {type(exc).__name__}: {exc}"
        if isinstance(exc, (TimeoutError, ConnectionError)):
            # Not answering at all: the gates then stop sending the rest of a batch.
            return BackendUnavailableError(message)
        if isinstance(exc, TypeError) and options:
            # The usual reason a LlamaIndex LLM raises TypeError on a call: a keyword it does not take.
            message += (
                f" (if it refuses the call options {sorted(options)}, build "
                "LlamaIndexChatModel(llm, pass_options=False, request_logprobs=False))"
            )
        return BackendError(message)


def _achat_blocks(llm: BaseLLM) -> bool:
    """Whether ``llm.achat`` is ``CustomLLM``'s own, which calls the blocking ``chat``."""
    # By the class that defines it: the method LlamaIndex hands out is a fresh wrapper each time.
    owner = next(klass for klass in type(llm).__mro__ if "achat" in vars(klass))
    return owner is CustomLLM


def to_chat_reply(response: ChatResponse, top_logprobs: int, stops: Sequence[str] = ()) -> ChatReply:
    """A core ``ChatReply`` from a LlamaIndex response: its log-probs when present (and
    asked for), cut at the first stop string."""
    text = response.message.content or ""
    tokens = parse_logprobs(response.logprobs) if top_logprobs > 0 else None
    finish_reason = str(response.additional_kwargs.get("finish_reason") or "stop")
    cut = first_stop(text, list(stops))
    if cut is None:
        return ChatReply(text, tokens, finish_reason)
    return ChatReply(text[:cut], _tokens_before(tokens, cut), "stop")


def parse_logprobs(logprobs: Sequence[Sequence[LogProb]] | None) -> tuple[TokenLogprob, ...] | None:
    """Tokens from LlamaIndex's per-position lists (the chosen token first, see
    ``LlamaIndexChatModel``); ``None`` when absent or malformed (the gate then reads the
    text alone)."""
    if not logprobs:
        return None
    tokens = []
    for position in logprobs:
        try:
            entries = [(str(entry.token), float(entry.logprob)) for entry in position]
        except (TypeError, ValueError, AttributeError):
            return None
        if not entries or any(math.isnan(lp) or lp == math.inf for _, lp in entries):
            return None
        chosen, chosen_logprob = entries[0]
        top = tuple(sorted(entries, key=lambda entry: -entry[1]))
        tokens.append(TokenLogprob(chosen, chosen_logprob, top))
    return tuple(tokens)


def _tokens_before(tokens: tuple[TokenLogprob, ...] | None, cut: int) -> tuple[TokenLogprob, ...] | None:
    """The tokens that begin before character ``cut`` of their joined text."""
    if tokens is None:
        return None
    kept, offset = [], 0
    for token in tokens:
        if offset >= cut:
            break
        kept.append(token)
        offset += len(token.token)
    return tuple(kept) or None
