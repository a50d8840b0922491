"""The core's chat models (the embedded SmolLM2 by default) as a LlamaIndex LLM."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from llama_index.core.base.llms.types import (
    ChatMessage,
    ChatResponse,
    ChatResponseAsyncGen,
    ChatResponseGen,
    CompletionResponse,
    CompletionResponseAsyncGen,
    CompletionResponseGen,
    LLMMetadata,
    LogProb,
    MessageRole,
)
from llama_index.core.llms.callbacks import llm_chat_callback, llm_completion_callback
from llama_index.core.llms.custom import CustomLLM
from pydantic import Field, PrivateAttr

from adaptive_gates.models import ChatModel, ChatReply, chat_model_or_default

from .messages import to_core_messages

#: SmolLM2's context length (the embedded default's).
DEFAULT_CONTEXT_WINDOW = 8192


class AdaptiveGatesLLM(CustomLLM):
    """A LlamaIndex ``LLM`` over any chat model of the core.

    With no ``chat_model`` it answers with the embedded SmolLM2-135M-Instruct, offline,
    so ``Settings.llm = AdaptiveGatesLLM()`` runs a whole pipeline without an API key.
    It is a chat model: ``complete(prompt)`` is one user turn. With ``logprobs=True``
    each response carries ``logprobs``: per generated token a list whose first entry is
    the token chosen and the rest its most likely alternatives.

    Async calls run the model in a worker thread, so the event loop is never blocked.
    The core answers whole replies: a stream is that reply as one chunk.

    Args:
        chat_model: a core ``ChatModel`` (``LocalChatModel`` over the embedded SmolLM2
            when omitted).
        max_tokens: reply length cap.
        temperature: 0 decodes greedily.
        logprobs: return token log-probabilities.
        top_logprobs: alternatives per token (with ``logprobs``).
        context_window: the model's context length, for LlamaIndex's prompt packing.
    """

    chat_model: Any = Field(default=None, exclude=True, description="The core chat model answering.")
    max_tokens: int = Field(default=256, ge=1, description="Reply length cap.")
    temperature: float = Field(default=0.0, ge=0.0, description="0 decodes greedily.")
    logprobs: bool = Field(default=False, description="Return token log-probabilities.")
    top_logprobs: int = Field(default=0, ge=0, description="Alternatives per token.")
    context_window: int = Field(default=DEFAULT_CONTEXT_WINDOW, ge=1, description="Context length.")

    _backend: ChatModel | None = PrivateAttr(default=None)

    @classmethod
    def class_name(cls) -> str:
        return "AdaptiveGatesLLM"

    @property
    def backend(self) -> ChatModel:
        """The core chat model answering (built on first use when none was given)."""
        if self._backend is None:
            self._backend = chat_model_or_default(self.chat_model)
        return self._backend

    @property
    def metadata(self) -> LLMMetadata:
        return LLMMetadata(
            context_window=self.context_window,
            num_output=self.max_tokens,
            is_chat_model=True,
            model_name=self.backend.model_id,
        )

    def _reply(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatReply:
        unknown = set(kwargs) - {"max_tokens", "temperature", "logprobs", "top_logprobs", "formatted"}
        if unknown:
            raise TypeError(f"unsupported call options for {type(self).__name__}: {sorted(unknown)}")
        wants = kwargs.get("logprobs", self.logprobs)
        top = int(kwargs.get("top_logprobs", self.top_logprobs))
        return self.backend.chat(
            to_core_messages(messages),
            max_tokens=kwargs.get("max_tokens", self.max_tokens),
            temperature=kwargs.get("temperature", self.temperature),
            # The core returns tokens only when alternatives are asked for; one is the least.
            top_logprobs=max(top, 1) if wants else 0,
        )

    def _chat_response(self, reply: ChatReply) -> ChatResponse:
        return ChatResponse(
            message=ChatMessage(role=MessageRole.ASSISTANT, content=reply.text),
            logprobs=token_logprobs(reply),
            additional_kwargs={"finish_reason": reply.finish_reason},
            raw=raw_response(reply),
        )

    def _completion_response(self, reply: ChatReply) -> CompletionResponse:
        return CompletionResponse(
            text=reply.text,
            delta=reply.text,
            logprobs=token_logprobs(reply),
            additional_kwargs={"finish_reason": reply.finish_reason},
            raw=raw_response(reply),
        )

    @staticmethod
    def _prompt_turn(prompt: str) -> list[ChatMessage]:
        return [ChatMessage(role=MessageRole.USER, content=prompt)]

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat_response(self._reply(messages, kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        response = self._chat_response(self._reply(messages, kwargs))
        response.delta = response.message.content
        yield response

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._completion_response(self._reply(self._prompt_turn(prompt), kwargs))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        yield self._completion_response(self._reply(self._prompt_turn(prompt), kwargs))

    # Model work runs in a worker thread: the event loop stays free.
    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat_response(await asyncio.to_thread(self._reply, messages, kwargs))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        response = self._chat_response(await asyncio.to_thread(self._reply, messages, kwargs))
        response.delta = response.message.content

        async def one() -> ChatResponseAsyncGen:
            yield response

        return one()

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._completion_response(await asyncio.to_thread(self._reply, self._prompt_turn(prompt), kwargs))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        response = self._completion_response(await asyncio.to_thread(self._reply, self._prompt_turn(prompt), kwargs))

        async def one() -> CompletionResponseAsyncGen:
            yield response

        return one()


def raw_response(reply: ChatReply) -> dict[str, Any] | None:
    """The response's ``raw`` payload: OpenAI's ``usage`` object when the backend
    counted tokens, as LlamaIndex's OpenAI LLM carries it in the raw completion."""
    return None if reply.usage is None else {"usage": reply.usage.to_json()}


def token_logprobs(reply: ChatReply) -> list[list[LogProb]] | None:
    """LlamaIndex's ``logprobs``: per token, the chosen token then its alternatives."""
    if reply.tokens is None:
        return None
    return [
        [LogProb(token=t.token, logprob=t.logprob, bytes=list(t.token.encode("utf-8")))]
        + [LogProb(token=alt, logprob=lp, bytes=list(alt.encode("utf-8"))) for alt, lp in t.top if alt != t.token]
        for t in reply.tokens
    ]
