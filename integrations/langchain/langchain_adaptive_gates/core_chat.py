"""Any LangChain chat model, or a runnable wrapping one, as the core's ``ChatModel``, so
it can stand behind the verbalized-confidence and SKR-prompt gates."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from langchain_core.messages import AIMessage, BaseMessage
from langchain_core.runnables import Runnable

from adaptive_gates import BackendError
from adaptive_gates.extend import tokens_from_openai
from adaptive_gates.models import AdaptedChatModel, ChatReply, TokenLogprob, TokenUsage

from .branch_types import is_message_type
from .messages import from_core_messages

#: The attributes LangChain's wrappers keep the runnable they wrap under:
#: ``bind``/``with_retry``/``with_config`` (``bound``), ``with_fallbacks`` (``runnable``),
#: ``configurable_fields``/``configurable_alternatives`` (``default``).
_WRAPPED = ("bound", "runnable", "default")


class LangChainChatModel(AdaptedChatModel):
    """The core's chat protocol (``chat(messages, ...) -> ChatReply``) over a LangChain
    chat model, or any runnable taking messages and returning a message: the model
    wrapped by ``with_fallbacks``, ``with_retry``, ``bind`` (its bound ``stop`` and
    options are kept), ``configurable_fields`` or ``configurable_alternatives``.

    Stop strings go to the model as LangChain's ``stop``. Token log-probabilities are
    used when the model returns them in OpenAI's format
    (``response_metadata["logprobs"]["content"]``, as ``ChatOpenAI`` and
    ``AdaptiveGatesChatModel`` do): the verbalized gate then scores P(uncertain) instead
    of the bare word. Other models give ``tokens=None`` and the gate reads the reply text.

    A failing model raises ``BackendError``; one that times out or cannot be reached
    (``TimeoutError``, ``ConnectionError``, or the provider SDK's own, such as
    ``openai.APITimeoutError``, however the framework wraps it) raises
    ``BackendUnavailableError``, so a gate stops sending it the rest of a batch. A
    wrapper raises what the model raised (``with_retry`` after its last attempt,
    ``with_fallbacks`` the first model's error when every one failed), so a model
    that is down is unavailable through it too. A runnable whose reply is not a
    message raises ``BackendError``.

    Args:
        llm: the LangChain chat model, or a runnable of messages to a message; one
            declaring another output type (a chain ending in ``StrOutputParser``) is
            refused with a ``TypeError``.
        model_id: the id recorded with saved gates (default: the name of the model
            inside the wrappers).
        pass_options: send ``max_tokens`` and ``temperature`` with each call, by OpenAI's
            names (turn off for a model that refuses them).
        request_logprobs: also send ``logprobs=True, top_logprobs=n`` when the gate asks
            for alternatives (for models that accept OpenAI's names).
    """

    def __init__(
        self,
        llm: Runnable[Any, Any],
        *,
        model_id: str | None = None,
        pass_options: bool = True,
        request_logprobs: bool = True,
    ) -> None:
        if not isinstance(llm, Runnable):
            raise TypeError(f"llm must be a LangChain chat model or a runnable wrapping one, got {type(llm).__name__}")
        if llm.OutputType is not Any and not is_message_type(llm.OutputType):
            raise TypeError(
                f"llm must return a message, and {type(llm).__name__} returns {llm.OutputType!r}:"
                " give the chat model, not a chain parsing its reply"
            )
        super().__init__(llm, model_id=model_id, pass_options=pass_options, request_logprobs=request_logprobs)

    def _default_model_id(self) -> str:
        """The ``model_name``/``model`` field of the model inside the wrappers, else its type."""
        model = innermost(self.llm)
        for name in ("model_name", "model"):
            value = getattr(model, name, None)
            if isinstance(value, str) and value:
                return value
        return f"langchain:{type(model).__name__}"

    def _send(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> Any:
        return self.llm.invoke(from_core_messages(turns), **_with_stops(stops, options))

    async def _asend(self, turns: list[dict[str, str]], stops: list[str], options: dict[str, Any]) -> Any:
        return await self.llm.ainvoke(from_core_messages(turns), **_with_stops(stops, options))

    def _reply(self, response: Any, top_logprobs: int, stops: list[str]) -> ChatReply:
        if not isinstance(response, BaseMessage):
            raise BackendError(f"{self.model_id} replied with a {type(response).__name__}, not a message")
        return to_chat_reply(response, top_logprobs)  # the model applied the stop strings


def innermost(runnable: Runnable[Any, Any]) -> Runnable[Any, Any]:
    """The runnable inside LangChain's wrappers (``bind``, ``with_retry``,
    ``with_fallbacks``, ``configurable_*``): the first one of a fallback chain, the
    default of configurable alternatives."""
    seen: set[int] = set()
    while id(runnable) not in seen:
        seen.add(id(runnable))
        inner = next((getattr(runnable, a) for a in _WRAPPED if isinstance(getattr(runnable, a, None), Runnable)), None)
        if inner is None:
            break
        runnable = inner
    return runnable


def _with_stops(stops: list[str], options: dict[str, Any]) -> dict[str, Any]:
    """The call's keywords: ``stop`` only when the gate gives stop strings, so a
    ``bind(stop=...)`` around the model keeps its own (a call's keywords override a
    binding's)."""
    return {**options, "stop": stops} if stops else options


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
    """Tokens from OpenAI's ``{"content": [{"token", "logprob", "top_logprobs"}]}``
    (the core's reader, ``tokens_from_openai``); ``None`` when absent or malformed (the
    gate then reads the text alone)."""
    if not isinstance(logprobs, Mapping):
        return None
    try:
        return tokens_from_openai(logprobs.get("content"), strict=False) or None
    except ValueError:
        return None
