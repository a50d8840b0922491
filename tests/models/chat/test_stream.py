"""Streaming chat replies: ChatChunk, the StreamingChatModel protocol, and stream_chat /
astream_chat over the embedded SmolLM2 (which streams) and over a model that cannot."""

from __future__ import annotations

import asyncio
import threading

import pytest

from adaptive_gates.models.chat.base import ChatModel, ChatReply, TokenUsage, user
from adaptive_gates.models.chat.local import LocalChatModel
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.models.chat.stream import ChatChunk, StreamingChatModel, astream_chat, stream_chat

QUESTION = user("What is the capital of France?")
LONG = user("Write a long story about a dragon who learns to cook.")


class WholeReplyChat:
    """A chat model that cannot stream: its reply comes whole."""

    @property
    def model_id(self) -> str:
        return "whole"

    def chat(self, messages, **options) -> ChatReply:
        return ChatReply("Paris.", usage=TokenUsage(5, 2))

    async def achat(self, messages, **options) -> ChatReply:
        return self.chat(messages, **options)


@pytest.fixture(scope="module")
def local_chat(lm):
    return LocalChatModel(lm)


def _model_is_free(lm) -> bool:
    """Whether no other thread holds the model's lock right now (a generation would)."""
    free = []

    def probe():
        got = lm._lock.acquire(blocking=False)
        free.append(got)
        if got:
            lm._lock.release()

    thread = threading.Thread(target=probe)
    thread.start()
    thread.join()
    return free[0]


def test_a_chunk_holds_the_reply_only_when_it_is_the_last():
    assert ChatChunk("Par").reply is None
    reply = ChatReply("Paris")
    assert ChatChunk("is", reply).reply is reply


def test_which_models_stream(local_chat):
    assert isinstance(local_chat, StreamingChatModel)
    assert isinstance(OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1"), StreamingChatModel)
    assert isinstance(WholeReplyChat(), ChatModel)
    assert not isinstance(WholeReplyChat(), StreamingChatModel)


def test_a_model_that_cannot_stream_gives_its_reply_as_one_last_piece():
    pieces = list(stream_chat(WholeReplyChat(), QUESTION))
    assert pieces == [ChatChunk("Paris.", ChatReply("Paris.", usage=TokenUsage(5, 2)))]
    pieces = asyncio.run(_collect(astream_chat(WholeReplyChat(), QUESTION)))
    assert [p.text for p in pieces] == ["Paris."]
    assert pieces[-1].reply == ChatReply("Paris.", usage=TokenUsage(5, 2))


def test_the_local_model_streams_chats_reply_piece_by_piece(local_chat):
    pieces = list(stream_chat(local_chat, QUESTION, max_tokens=6))
    assert len(pieces) > 1
    assert all(p.reply is None for p in pieces[:-1])
    whole = pieces[-1].reply
    assert whole is not None
    assert "".join(p.text for p in pieces) == whole.text
    assert whole == local_chat.chat(QUESTION, max_tokens=6)


def test_astream_chat_gives_the_same_pieces(local_chat):
    pieces = asyncio.run(_collect(astream_chat(local_chat, QUESTION, max_tokens=6)))
    synced = list(stream_chat(local_chat, QUESTION, max_tokens=6))
    assert [p.text for p in pieces] == [p.text for p in synced]
    assert pieces[-1].reply == synced[-1].reply


def test_closing_the_stream_early_stops_the_generation(local_chat, lm):
    pieces = stream_chat(local_chat, LONG, max_tokens=200)
    first = next(pieces)
    assert first.reply is None
    assert not _model_is_free(lm)  # still generating
    pieces.close()
    assert _model_is_free(lm)


def test_leaving_an_async_stream_early_frees_the_model(local_chat, lm):
    async def first_piece():
        async for piece in astream_chat(local_chat, LONG, max_tokens=200):
            assert not _model_is_free(lm)  # still generating
            return piece
        return None

    piece = asyncio.run(first_piece())
    assert piece is not None and piece.reply is None
    assert _model_is_free(lm)


def test_bad_options_are_refused_before_any_piece(local_chat):
    with pytest.raises(ValueError, match="max_tokens"):
        next(stream_chat(local_chat, QUESTION, max_tokens=0))


async def _collect(pieces):
    return [p async for p in pieces]
