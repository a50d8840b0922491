"""The core's chat models (the embedded SmolLM2 by default) as a LlamaIndex LLM."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncGenerator, Callable, Generator, Sequence
from typing import Any, TypeVar

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
from pydantic import Field, PrivateAttr, model_validator

from adaptive_gates.extend import tokens_to_openai
from adaptive_gates.models import (
    ChatChunk,
    ChatModel,
    ChatOptions,
    ChatReply,
    astream_chat,
    chat_model_or_default,
    embedded_smollm2_gguf,
    options_from_openai,
    stream_chat,
)

from .messages import to_core_messages

#: SmolLM2's context length (the embedded default's).
DEFAULT_CONTEXT_WINDOW = 8192

R = TypeVar("R", ChatResponse, CompletionResponse)


class AdaptiveGatesLLM(CustomLLM):
    """A LlamaIndex ``LLM`` over any chat model of the core.

    With no ``chat_model`` it answers with the embedded SmolLM2-135M-Instruct, offline,
    so ``Settings.llm = AdaptiveGatesLLM()`` runs a whole pipeline without an API key.
    It is a chat model: ``complete(prompt)`` is one user turn. With ``logprobs=True``
    each response carries ``logprobs``: per generated token a list whose first entry is
    the token chosen and the rest its most likely alternatives.

    Streams (``stream_chat``, ``stream_complete`` and their async forms) yield one
    response per token as it is generated, each with the text so far and the new
    piece as its ``delta``; the last also carries the finish reason, log-probs and
    usage. Joined, the deltas equal the non-streamed reply. A core chat model that
    cannot stream gives its whole reply as one response. Leaving a stream early stops
    the generation.

    Async calls run the model in worker threads, so the event loop is never blocked.

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

    @model_validator(mode="after")
    def _embedded_model_installed(self) -> AdaptiveGatesLLM:
        """With no ``chat_model``, the embedded SmolLM2 answers: a missing weight package
        is said now (``MissingModelPackageError``), not at the first question."""
        if self.chat_model is None:
            embedded_smollm2_gguf()
        return self

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

    def _options(self, kwargs: dict[str, Any]) -> ChatOptions:
        """The core call's options: per-call ``kwargs`` (OpenAI's names) over the fields."""
        return options_from_openai(self, kwargs, also_taken={"formatted"})[0]  # formatted: LlamaIndex's own

    def _reply(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> ChatReply:
        return self.backend.chat(to_core_messages(messages), **self._options(kwargs))

    def _pieces(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> Generator[ChatChunk, None, None]:
        """The reply piece by piece as the backend generates it (one piece when it cannot stream)."""
        return stream_chat(self.backend, to_core_messages(messages), **self._options(kwargs))

    def _apieces(self, messages: Sequence[ChatMessage], kwargs: dict[str, Any]) -> AsyncGenerator[ChatChunk, None]:
        """``_pieces`` for async code; the event loop is never blocked."""
        return astream_chat(self.backend, to_core_messages(messages), **self._options(kwargs))

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

    def _chat_chunk(self, text: str, piece: ChatChunk) -> ChatResponse:
        """A streamed chat response: ``text`` so far, ``piece`` as its ``delta``; the last
        carries what the whole reply says (finish reason, log-probs, usage)."""
        if piece.reply is None:
            return ChatResponse(message=ChatMessage(role=MessageRole.ASSISTANT, content=text), delta=piece.text)
        response = self._chat_response(piece.reply)
        response.delta = piece.text
        return response

    def _completion_chunk(self, text: str, piece: ChatChunk) -> CompletionResponse:
        """``_chat_chunk`` for completions."""
        if piece.reply is None:
            return CompletionResponse(text=text, delta=piece.text)
        response = self._completion_response(piece.reply)
        response.delta = piece.text
        return response

    @staticmethod
    def _prompt_turn(prompt: str) -> list[ChatMessage]:
        return [ChatMessage(role=MessageRole.USER, content=prompt)]

    @llm_chat_callback()
    def chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat_response(self._reply(messages, kwargs))

    @llm_chat_callback()
    def stream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseGen:
        return _cumulative(self._pieces(messages, kwargs), self._chat_chunk)

    @llm_completion_callback()
    def complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._completion_response(self._reply(self._prompt_turn(prompt), kwargs))

    @llm_completion_callback()
    def stream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseGen:
        return _cumulative(self._pieces(self._prompt_turn(prompt), kwargs), self._completion_chunk)

    # Model work runs in a worker thread: the event loop stays free.
    @llm_chat_callback()
    async def achat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponse:
        return self._chat_response(await asyncio.to_thread(self._reply, messages, kwargs))

    @llm_chat_callback()
    async def astream_chat(self, messages: Sequence[ChatMessage], **kwargs: Any) -> ChatResponseAsyncGen:
        return _acumulative(self._apieces(messages, kwargs), self._chat_chunk)

    @llm_completion_callback()
    async def acomplete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponse:
        return self._completion_response(await asyncio.to_thread(self._reply, self._prompt_turn(prompt), kwargs))

    @llm_completion_callback()
    async def astream_complete(self, prompt: str, formatted: bool = False, **kwargs: Any) -> CompletionResponseAsyncGen:
        return _acumulative(self._apieces(self._prompt_turn(prompt), kwargs), self._completion_chunk)


def _cumulative(
    pieces: Generator[ChatChunk, None, None], respond: Callable[[str, ChatChunk], R]
) -> Generator[R, None, None]:
    """One response per piece that adds text (and the last, which carries the reply),
    each with the text so far; closing it closes ``pieces``, which stops the generation."""
    text = ""
    with contextlib.closing(pieces):
        for piece in pieces:
            text += piece.text
            if piece.text or piece.reply is not None:
                yield respond(text, piece)


async def _acumulative(
    pieces: AsyncGenerator[ChatChunk, None], respond: Callable[[str, ChatChunk], R]
) -> AsyncGenerator[R, None]:
    """``_cumulative`` for async code."""
    text = ""
    async with contextlib.aclosing(pieces):
        async for piece in pieces:
            text += piece.text
            if piece.text or piece.reply is not None:
                yield respond(text, piece)


def raw_response(reply: ChatReply) -> dict[str, Any] | None:
    """The response's ``raw`` payload: OpenAI's ``usage`` object when the backend
    counted tokens, as LlamaIndex's OpenAI LLM carries it in the raw completion."""
    return None if reply.usage is None else {"usage": reply.usage.to_json()}


def token_logprobs(reply: ChatReply) -> list[list[LogProb]] | None:
    """LlamaIndex's ``logprobs``: per token, the chosen token then its alternatives
    (written by the core's ``tokens_to_openai``, as OpenAI's entries with their bytes)."""
    if reply.tokens is None:
        return None
    return [
        [_logprob(entry)] + [_logprob(alt) for alt in entry["top_logprobs"] if alt["token"] != entry["token"]]
        for entry in tokens_to_openai(reply.tokens, with_bytes=True)
    ]


def _logprob(entry: dict[str, Any]) -> LogProb:
    return LogProb(token=entry["token"], logprob=entry["logprob"], bytes=entry["bytes"])
