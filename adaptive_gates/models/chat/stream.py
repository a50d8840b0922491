"""Chat replies handed out piece by piece while they are generated.

A ``StreamingChatModel`` is a ``ChatModel`` that also streams: ``stream`` and
``astream`` take ``chat``'s arguments and yield ``ChatChunk``s. ``stream_chat`` and
``astream_chat`` stream any chat model, one that cannot as a single piece, so a caller
writes one loop for both.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncGenerator, Generator, Sequence
from dataclasses import dataclass
from typing import Protocol, Unpack, runtime_checkable

from .base import ChatModel, ChatOptions, ChatReply, Message, SyncChatModel


@dataclass(frozen=True)
class ChatChunk:
    """A piece of a streamed reply. ``text`` continues the reply; the last piece alone
    has ``reply``, the whole ``ChatReply`` (its text is every piece's text joined; its
    finish reason, usage and log-probs are known only at the end)."""

    text: str
    reply: ChatReply | None = None


@runtime_checkable
class StreamingChatModel(ChatModel, Protocol):
    """A ``ChatModel`` that streams its replies.

    ``stream`` and ``astream`` take ``chat``'s arguments and yield ``ChatChunk``s whose
    texts join into the text ``chat`` replies for the same request. Closing the
    generator early (``close``, ``aclose``, or leaving the loop and dropping it) stops
    the generation; ``astream`` never blocks the event loop.
    """

    def stream(
        self, messages: Sequence[Message], **options: Unpack[ChatOptions]
    ) -> Generator[ChatChunk, None, None]: ...

    def astream(
        self, messages: Sequence[Message], **options: Unpack[ChatOptions]
    ) -> AsyncGenerator[ChatChunk, None]: ...


def stream_chat(
    model: SyncChatModel, messages: Sequence[Message], **options: Unpack[ChatOptions]
) -> Generator[ChatChunk, None, None]:
    """``model``'s reply to ``messages`` piece by piece: as it streams when it is a
    ``StreamingChatModel``, else its whole reply as the one (last) piece."""
    if isinstance(model, StreamingChatModel):
        yield from model.stream(messages, **options)  # closing this closes the model's stream
        return
    reply = model.chat(messages, **options)
    yield ChatChunk(reply.text, reply)


async def astream_chat(
    model: ChatModel, messages: Sequence[Message], **options: Unpack[ChatOptions]
) -> AsyncGenerator[ChatChunk, None]:
    """``stream_chat`` for async code."""
    if isinstance(model, StreamingChatModel):
        async with contextlib.aclosing(model.astream(messages, **options)) as pieces:
            async for piece in pieces:
                yield piece
        return
    reply = await model.achat(messages, **options)
    yield ChatChunk(reply.text, reply)
