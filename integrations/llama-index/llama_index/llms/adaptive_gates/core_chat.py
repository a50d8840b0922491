"""Any LlamaIndex LLM as the core's ``ChatModel``, so it can stand behind the
verbalized-confidence and SKR-prompt gates."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

from llama_index.core.base.llms.base import BaseLLM
from llama_index.core.base.llms.types import ChatResponse, LogProb
from llama_index.core.llms.custom import CustomLLM

from adaptive_gates.extend import first_stop, tokens_from_openai
from adaptive_gates.models import AdaptedChatModel, ChatReply, TokenLogprob, TokenUsage

from .messages import from_core_messages

#: LlamaIndex's placeholder when an LLM does not name its model.
_UNNAMED = "unknown"


class LlamaIndexChatModel(AdaptedChatModel):
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
    (``TimeoutError``, ``ConnectionError``, or the provider SDK's own, such as
    ``openai.APITimeoutError``, however the framework wraps it) raises
    ``BackendUnavailableError``, so a gate stops sending it the rest of a batch.

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
        super().__init__(llm, model_id=model_id, pass_options=pass_options, request_logprobs=request_logprobs)

    def _default_model_id(self) -> str:
        """The LLM's ``metadata.model_name``, else its type."""
        name = self.llm.metadata.model_name
        return name if name and name != _UNNAMED else f"llama-index:{type(self.llm).__name__}"

    def _send(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> ChatResponse:
        return self.llm.chat(from_core_messages(turns), **options)

    async def _asend(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> ChatResponse:
        if _achat_blocks(self.llm):
            return await asyncio.to_thread(self._send, turns, stops, options)
        return await self.llm.achat(from_core_messages(turns), **options)

    def _reply(self, response: ChatResponse, top_logprobs: int, stops: list[str]) -> ChatReply:
        return to_chat_reply(response, top_logprobs, stops)


def _achat_blocks(llm: BaseLLM) -> bool:
    """Whether ``llm.achat`` is ``CustomLLM``'s own, which calls the blocking ``chat``."""
    # By the class that defines it: the method LlamaIndex hands out is a fresh wrapper each time.
    owner = next(klass for klass in type(llm).__mro__ if "achat" in vars(klass))
    return owner is CustomLLM


def to_chat_reply(response: ChatResponse, top_logprobs: int, stops: Sequence[str] = ()) -> ChatReply:
    """A core ``ChatReply`` from a LlamaIndex response: its log-probs when present (and
    asked for), its token usage when the raw response carries OpenAI's ``usage``, cut
    at the first stop string."""
    text = response.message.content or ""
    tokens = parse_logprobs(response.logprobs) if top_logprobs > 0 else None
    finish_reason = str(response.additional_kwargs.get("finish_reason") or "stop")
    raw = response.raw
    usage = TokenUsage.from_openai(raw.get("usage") if isinstance(raw, Mapping) else getattr(raw, "usage", None))
    cut = first_stop(text, list(stops))
    if cut is None:
        return ChatReply(text, tokens, finish_reason, usage)
    return ChatReply(text[:cut], _tokens_before(tokens, cut), "stop", usage)


def parse_logprobs(logprobs: Sequence[Sequence[LogProb]] | None) -> tuple[TokenLogprob, ...] | None:
    """Tokens from LlamaIndex's per-position lists (the chosen token first, see
    ``LlamaIndexChatModel``), read by the core's ``tokens_from_openai`` as OpenAI's
    entries (every entry of a position an alternative, most likely first); ``None`` when
    absent or malformed (the gate then reads the text alone)."""
    if not logprobs or not all(logprobs):  # a position without a token
        return None
    try:
        entries = [
            {
                "token": position[0].token,
                "logprob": position[0].logprob,
                "top_logprobs": [
                    {"token": e.token, "logprob": e.logprob} for e in sorted(position, key=lambda e: -e.logprob)
                ],
            }
            for position in logprobs
        ]
        return tokens_from_openai(entries, strict=False)
    except (AttributeError, TypeError, ValueError):  # an entry that is no LogProb, a logprob that is no number
        return None


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
