"""Replies of the embedded SmolLM2 streamed as they are generated: the same reply as
``chat``, stop strings and special tokens never handed out, the model freed when a
stream is closed early, the event loop free while ``astream`` waits."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from adaptive_gates.models import (
    ChatChunk,
    LocalCausalLM,
    LocalChatModel,
    StreamingChatModel,
    ThreadedAsyncChat,
    astream_chat,
    stream_chat,
)
from adaptive_gates.models.lm.generation import settled_length
from support.event_loop import run_beside_a_ticker

pytestmark = pytest.mark.usefixtures("one_torch_thread")

COLORS = [{"role": "user", "content": "Name three colors, separated by commas."}]
SKY = [{"role": "user", "content": "Explain in two sentences why the sky looks blue during the day."}]


@pytest.fixture(scope="module")
def chat(lm: LocalCausalLM) -> LocalChatModel:
    return LocalChatModel(lm)


@pytest.fixture(scope="module")
def questions(qa_records) -> list[list[dict[str, str]]]:
    """Three real NQ-open dev questions as conversations."""
    return [[{"role": "user", "content": r.question}] for r in qa_records[:3]]


def joined(pieces: list[ChatChunk]) -> str:
    return "".join(p.text for p in pieces)


def stream_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("token stream")]


def free_from_another_thread(lm: LocalCausalLM) -> bool:
    """Whether another thread can take the model's lock at once."""

    def take() -> bool:
        if not lm._lock.acquire(blocking=False):
            return False
        lm._lock.release()
        return True

    with ThreadPoolExecutor(1) as pool:
        return pool.submit(take).result()


def a_stop_across_tokens(chat: LocalChatModel, messages, max_tokens: int) -> tuple[str, str]:
    """The greedy reply's text, and a stop string made of the end of its third piece
    and the start of its fourth: one that only a later token completes."""
    pieces = [p.text for p in chat.stream(messages, max_tokens=max_tokens)]
    assert len(pieces) > 4 and all(len(p) >= 2 for p in pieces[2:4]), pieces
    return "".join(pieces), pieces[2][-2:] + pieces[3][:2]


def test_settled_length_holds_back_what_may_still_change():
    assert settled_length("The sky", []) == len("The sky")
    assert settled_length("blue, gr", [", green"]) == len("blue")  # may become the stop string
    assert settled_length("blue, red", [", green"]) == len("blue, red")  # cannot any more
    assert settled_length("blue, green, red", [", green"]) == len("blue")  # cut before it
    assert settled_length("ab", ["b", "abc"]) == 0  # a longer stop may start earlier than the one found
    assert settled_length("caf\ufffd", []) == len("caf")  # a character whose bytes have not all come


def test_greedy_pieces_join_into_the_reply_of_chat(chat, questions):
    for messages in [COLORS, *questions]:
        reply = chat.chat(messages, max_tokens=8, top_logprobs=2)
        pieces = list(chat.stream(messages, max_tokens=8, top_logprobs=2))
        assert len(pieces) > 2 and joined(pieces) == reply.text
        assert all(p.reply is None for p in pieces[:-1])
        assert pieces[-1].reply == reply  # finish reason, usage and log-probs at the end
        assert reply.tokens is not None and reply.usage is not None


def test_a_stop_string_is_never_handed_out(chat):
    free, stop = a_stop_across_tokens(chat, SKY, 8)
    reply = chat.chat(SKY, max_tokens=8, stop=[stop])
    assert reply.finish_reason == "stop" and reply.text == free[: free.index(stop)]
    seen = ""
    for piece in chat.stream(SKY, max_tokens=8, stop=[stop]):
        seen += piece.text
        assert reply.text.startswith(seen)  # no piece runs into the stop string
    assert seen == reply.text


def test_the_end_of_turn_token_is_not_text(chat):
    pieces = list(chat.stream(COLORS, max_tokens=24))
    assert pieces[-1].reply is not None and pieces[-1].reply.finish_reason == "eos"
    assert "<|im_end|>" not in joined(pieces) and joined(pieces) == chat.chat(COLORS, max_tokens=24).text


def test_a_sampled_stream_is_the_sampled_reply(chat):
    sampled = LocalChatModel(chat.lm, seed=3)
    reply = sampled.chat(COLORS, max_tokens=8, temperature=0.9)
    pieces = list(sampled.stream(COLORS, max_tokens=8, temperature=0.9))
    assert joined(pieces) == reply.text and pieces[-1].reply == reply


def test_closing_a_stream_early_stops_the_generation_and_frees_the_model(chat):
    lm = chat.lm
    steps = []
    hook = lm.model.model.norm.register_forward_hook(lambda *_: steps.append(1))
    try:
        pieces = chat.stream(SKY, max_tokens=40)
        first = [next(pieces).text, next(pieces).text]
        pieces.close()
    finally:
        hook.remove()
    assert first and len(steps) < 40  # the generation stopped well before its length cap
    assert not stream_threads() and free_from_another_thread(lm)
    with ThreadPoolExecutor(1) as pool:  # the model answers another thread in full
        reply = pool.submit(chat.chat, SKY, max_tokens=12).result()
    assert reply.text.startswith("".join(first))


def test_leaving_a_loop_early_closes_the_stream(chat):
    for _ in chat.stream(SKY, max_tokens=40):
        break  # the dropped generator is closed
    assert not stream_threads() and free_from_another_thread(chat.lm)


def test_the_token_stream_holds_the_generation_once_read(lm):
    tokens = lm.stream("Name three colors, separated by commas.", max_new_tokens=12)
    with pytest.raises(RuntimeError, match="has not finished"):
        _ = tokens.generation
    text = "".join(tokens)
    (greedy,) = lm.generate("Name three colors, separated by commas.", max_new_tokens=12)
    assert tokens.generation == greedy and text == greedy.text


def test_astream_is_the_reply_of_chat_and_leaves_the_loop_free(chat, questions):
    messages = questions[0]
    reply = chat.chat(messages, max_tokens=8)

    async def streamed():
        return [p async for p in chat.astream(messages, max_tokens=8)]

    pieces, ticks = run_beside_a_ticker(streamed())
    assert len(pieces) > 2 and joined(pieces) == reply.text and pieces[-1].reply == reply
    assert ticks > len(pieces)  # the loop ran other work while the model generated


def test_an_async_stream_closed_or_cancelled_early_frees_the_model(chat):
    async def close_early() -> str:
        async with contextlib.aclosing(chat.astream(SKY, max_tokens=40)) as pieces:
            async for piece in pieces:
                return piece.text
        return ""

    async def cancel_midway() -> None:
        started = asyncio.Event()

        async def consume() -> None:
            async for _ in chat.astream(SKY, max_tokens=40):
                started.set()

        task = asyncio.create_task(consume())
        await started.wait()
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    first = asyncio.run(close_early())
    assert first and not stream_threads() and free_from_another_thread(chat.lm)
    # asyncio.run waits for its worker threads: none is left waiting for a piece.
    asyncio.run(cancel_midway())
    assert not stream_threads() and free_from_another_thread(chat.lm)


def test_a_chat_model_that_cannot_stream_gives_its_reply_as_one_piece(chat):
    plain = ThreadedAsyncChat(chat)  # chat and achat only
    assert isinstance(chat, StreamingChatModel) and not isinstance(plain, StreamingChatModel)
    reply = chat.chat(COLORS, max_tokens=6)
    assert list(stream_chat(plain, COLORS, max_tokens=6)) == [ChatChunk(reply.text, reply)]

    async def collect(model):
        return [p async for p in astream_chat(model, COLORS, max_tokens=6)]

    assert asyncio.run(collect(plain)) == [ChatChunk(reply.text, reply)]
    streamed = asyncio.run(collect(chat))
    assert len(streamed) > 2 and joined(streamed) == reply.text


def test_bad_requests_are_refused_when_the_stream_is_asked_for(chat, lm):
    with pytest.raises(ValueError, match="non-empty list"):
        chat.stream([])
    with pytest.raises(ValueError, match="temperature must be >= 0"):
        chat.stream(COLORS, temperature=-1)
    with pytest.raises(ValueError, match="stop strings"):
        chat.stream(COLORS, stop=[""])
    with pytest.raises(ValueError, match="top_logprobs needs greedy decoding"):
        lm.stream("Hi", temperature=0.7, top_logprobs=2)
    with pytest.raises(ValueError, match="one prompt string"):
        lm.stream(["Hi", "Hello"])  # type: ignore[arg-type]
    assert not stream_threads()


def test_a_temperature_too_small_to_divide_by_decodes_greedily(chat):
    greedy = chat.chat(COLORS, max_tokens=4)
    for tiny in (5e-324, 1e-6):  # 5e-324: what the server's fuzzing sent, which overflowed the logits
        assert chat.chat(COLORS, max_tokens=4, temperature=tiny).text == greedy.text
        assert joined(list(chat.stream(COLORS, max_tokens=4, temperature=tiny))) == greedy.text
