"""Any LangChain chat model as the core's ``ChatModel``, so it can stand behind the
verbalized-confidence and SKR-prompt gates."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage

from adaptive_gates.models import AdaptedChatModel, ChatReply, TokenLogprob, TokenUsage

from .messages import from_core_messages


class LangChainChatModel(AdaptedChatModel):
    """The core's chat protocol (``chat(messages, ...) -> ChatReply``) over a LangChain
    chat model.

    Stop strings go to the model as LangChain's ``stop``. Token log-probabilities are
    used when the model returns them in OpenAI's format
    (``response_metadata["logprobs"]["content"]``, as ``ChatOpenAI`` and
    ``AdaptiveGatesChatModel`` do): the verbalized gate then scores P(uncertain) instead
    of the bare word. Other models give ``tokens=None`` and the gate reads the reply text.

    A failing model raises ``BackendError``; one that times out or cannot be reached
    (``TimeoutError``, ``ConnectionError``, or the provider SDK's own, such as
    ``openai.APITimeoutError``, however the framework wraps it) raises
    ``BackendUnavailableError``, so a gate stops sending it the rest of a batch.

    Args:
        llm: the LangChain chat model.
        model_id: the id recorded with saved gates (default: the model's own name).
        pass_options: send ``max_tokens`` and ``temperature`` with each call, by OpenAI's
            names (turn off for a model that refuses them).
        request_logprobs: also send ``logprobs=True, top_logprobs=n`` when the gate asks
            for alternatives (for models that accept OpenAI's names).
    """

    def __init__(
        self,
        llm: BaseChatModel,
        *,
        model_id: str | None = None,
        pass_options: bool = True,
        request_logprobs: bool = True,
    ) -> None:
        if not isinstance(llm, BaseChatModel):
            raise TypeError(f"llm must be a LangChain BaseChatModel, got {type(llm).__name__}")
        super().__init__(llm, model_id=model_id, pass_options=pass_options, request_logprobs=request_logprobs)

    def _default_model_id(self) -> str:
        """The model's ``model_name``/``model`` field, else its type."""
        for name in ("model_name", "model"):
            value = getattr(self.llm, name, None)
            if isinstance(value, str) and value:
                return value
        return f"langchain:{type(self.llm).__name__}"

    def _send(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> BaseMessage:
        return self.llm.invoke(from_core_messages(turns), stop=stops or None, **options)

    async def _asend(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> BaseMessage:
        return await self.llm.ainvoke(from_core_messages(turns), stop=stops or None, **options)

    def _reply(self, response: BaseMessage, top_logprobs: int, stops: list[str]) -> ChatReply:
        return to_chat_reply(response, top_logprobs)  # the model applied the stop strings


def to_chat_reply(message: BaseMessage, top_logprobs: int) -> ChatReply:
    """A core ``ChatReply`` from a LangChain reply, with its OpenAI-format log-probs
    when present (and asked for) and its token usage when the model reports it
    (``AIMessage.usage_metadata``)."""
    metadata = message.response_metadata or {}
    tokens = parse_openai_logprobs(metadata.get("logprobs")) if top_logprobs > 0 else None
    return ChatReply(message.text, tokens, str(metadata.get("finish_reason") or "stop"), _usage(message))


def _usage(message: BaseMessage) -> TokenUsage | None:
    """The reply's ``usage_metadata`` (input and output tokens) as a ``TokenUsage``."""
    usage = message.usage_metadata if isinstance(message, AIMessage) else None
    if not usage:
        return None
    return TokenUsage.from_openai(
        {"prompt_tokens": usage.get("input_tokens"), "completion_tokens": usage.get("output_tokens")}
    )


def parse_openai_logprobs(logprobs: Any) -> tuple[TokenLogprob, ...] | None:
    """Tokens from OpenAI's ``{"content": [{"token", "logprob", "top_logprobs"}]}``;
    ``None`` when absent or malformed (the gate then reads the text alone)."""
    if not isinstance(logprobs, Mapping) or not isinstance(logprobs.get("content"), list):
        return None
    tokens = []
    for entry in logprobs["content"]:
        try:
            top = tuple((str(alt["token"]), float(alt["logprob"])) for alt in entry.get("top_logprobs") or ())
            token = TokenLogprob(str(entry["token"]), float(entry["logprob"]), top)
        except (KeyError, TypeError, ValueError, AttributeError):
            return None
        if not math.isfinite(token.logprob) and token.logprob != -math.inf:
            return None
        tokens.append(token)
    return tuple(tokens) or None
