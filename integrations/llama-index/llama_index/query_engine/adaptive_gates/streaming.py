"""Streamed chat answers that carry the gate's decision, and their writing to memory."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, Generator
from dataclasses import dataclass
from typing import Any

from llama_index.core.base.llms.types import ChatMessage, MessageRole
from llama_index.core.base.response.schema import RESPONSE_TYPE, AsyncStreamingResponse, StreamingResponse
from llama_index.core.chat_engine.types import StreamingAgentChatResponse
from llama_index.core.chat_engine.utils import aresponse_gen_from_query_engine, response_gen_from_query_engine
from llama_index.core.memory import BaseMemory
from llama_index.core.types import Thread


@dataclass
class GatedStreamingChatResponse(StreamingAgentChatResponse):
    """LlamaIndex's streaming chat response with the ``metadata`` its non-streamed
    ``AgentChatResponse`` has: the gate's decision, the route and the question asked
    are known before the first token."""

    metadata: dict[str, Any] | None = None


def tokens_of(response: RESPONSE_TYPE) -> Generator[str, None, None]:
    """A query response's text as it streams (a whole one as one piece)."""
    if isinstance(response, StreamingResponse) and response.response_gen is not None:
        yield from response.response_gen
    else:
        yield str(response)


async def atokens_of(response: RESPONSE_TYPE) -> AsyncGenerator[str, None]:
    """``tokens_of`` for async responses."""
    if isinstance(response, AsyncStreamingResponse):
        async for token in response.async_response_gen():
            yield token
    else:
        yield str(response)


def one_piece(text: str) -> Generator[str, None, None]:
    """``text`` as a stream of one piece."""
    yield text


async def aone_piece(text: str) -> AsyncGenerator[str, None]:
    """``one_piece`` for async code."""
    yield text


def stream_into(
    memory: BaseMemory, message: str, tokens: Generator[str, None, None], **fields: Any
) -> GatedStreamingChatResponse:
    """The streamed answer to ``message``: the user's turn goes to ``memory`` now, the
    answer once streamed (as LlamaIndex's chat engines write it, from a thread that
    feeds the response's ``response_gen``). ``fields`` are the response's other fields."""
    memory.put(ChatMessage(role=MessageRole.USER, content=message))
    response = GatedStreamingChatResponse(chat_stream=response_gen_from_query_engine(tokens), **fields)
    writer = Thread(target=response.write_response_to_history, args=(memory,))
    response.write_response_to_history_thread = writer
    writer.start()
    return response


async def astream_into(
    memory: BaseMemory, message: str, tokens: AsyncGenerator[str, None], **fields: Any
) -> GatedStreamingChatResponse:
    """``stream_into`` for async code: a task writes the answer to memory."""
    await memory.aput(ChatMessage(role=MessageRole.USER, content=message))
    response = GatedStreamingChatResponse(achat_stream=aresponse_gen_from_query_engine(tokens), **fields)
    response.awrite_response_to_history_task = asyncio.create_task(response.awrite_response_to_history(memory))
    return response
