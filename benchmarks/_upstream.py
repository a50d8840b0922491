"""The OpenAI-compatible upstream servers ``serve_throughput.py`` starts, each in a
process of its own (``POST /v1/chat/completions``, streamed or not, and ``GET /healthz``):

- ``smollm2``: the embedded SmolLM2 answers (greedy). Requests waiting together are
  generated together, up to ``--batch`` at a time (``LocalChatModel.chat_batch``), as
  an LLM serving engine batches; a streamed request is generated on its own. With
  ``--record FILE`` every answer is appended to FILE (JSONL: messages, text,
  finish_reason).
- ``replay``: answers at once with the answers recorded by ``smollm2 --record``,
  looked up by the request's messages; a prompt never recorded is a 500 error. No LLM
  runs: what is left is the HTTP round trip.
- ``instant``: answers every prompt at once with the same short text, so any question
  can be asked (new ones too) and only the HTTP round trip is left.

    python benchmarks/_upstream.py smollm2 --port P [--record FILE] [--batch 8]
    python benchmarks/_upstream.py replay FILE --port P
    python benchmarks/_upstream.py instant --port P
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response, StreamingResponse

from adaptive_gates.models import LocalChatModel
from adaptive_gates.models.chat.base import ChatReply, Message
from adaptive_gates.records.data import iter_jsonl
from adaptive_gates.serve.openai_error import error_body
from adaptive_gates.serve.protocol import ChatCompletionRequest, chunk, completion, event

logger = logging.getLogger(__name__)

#: The answer length when a request sets none.
DEFAULT_MAX_TOKENS = 16

Answer = tuple[str, str]  # text, finish reason
Pieces = Callable[[list[Message], dict[str, Any]], AsyncIterator[str]]


def prompt_key(messages: list[Message]) -> str:
    """What a recorded answer is looked up by: the request's messages as JSON."""
    return json.dumps(messages, sort_keys=True, ensure_ascii=False)


class BatchingChat:
    """The embedded model answering whatever requests are waiting together in one
    ``chat_batch`` call (at most ``size``; requests with other options wait for the next).

    Args:
        model: the chat model that generates.
        size: the largest batch.
        record: a JSONL file every answer is appended to (``None``: nothing recorded).
    """

    def __init__(self, model: LocalChatModel, size: int, record: Path | None) -> None:
        self.model = model
        self.size = size
        self.record = record
        self._queue: asyncio.Queue[tuple[list[Message], dict[str, Any], asyncio.Future[Answer]]] = asyncio.Queue()

    async def answer(self, messages: list[Message], options: dict[str, Any]) -> Answer:
        """The answer to one request, generated with the requests waiting beside it."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        await self._queue.put((messages, options, future))
        return await future

    async def pieces(self, messages: list[Message], options: dict[str, Any]) -> AsyncIterator[str]:
        """One request's answer as it is generated (on its own, not batched)."""
        reply = None
        async for piece in self.model.astream(messages, **options):
            if piece.text:
                yield piece.text
            reply = piece.reply or reply
        if reply is not None:
            self._write([(messages, reply.text, reply.finish_reason)])

    async def run(self) -> None:
        """Generate the waiting requests batch by batch, forever."""
        while True:
            waiting = [await self._queue.get()]
            while len(waiting) < self.size and not self._queue.empty():
                waiting.append(self._queue.get_nowait())
            first = waiting[0][1]
            batch = [item for item in waiting if item[1] == first]
            for item in waiting:
                if item[1] != first:
                    self._queue.put_nowait(item)
            try:
                replies = await asyncio.to_thread(self.model.chat_batch, [m for m, _, _ in batch], **first)
            except Exception as exc:  # the requests fail, the server goes on
                for _, _, future in batch:
                    future.set_exception(exc)
                continue
            self._write([(m, r.text, r.finish_reason) for (m, _, _), r in zip(batch, replies)])
            for (_, _, future), reply in zip(batch, replies):
                future.set_result(_answer(reply))

    def _write(self, answers: list[tuple[list[Message], str, str]]) -> None:
        if self.record is None:
            return
        with self.record.open("a", encoding="utf-8") as out:
            for messages, text, finish_reason in answers:
                line = {"messages": messages, "text": text, "finish_reason": finish_reason}
                out.write(json.dumps(line, ensure_ascii=False) + "\n")


def _answer(reply: ChatReply) -> Answer:
    return reply.text, "length" if reply.finish_reason == "length" else "stop"


class Replay:
    """Recorded answers, looked up by the request's messages (the first recorded wins)."""

    def __init__(self, recorded: Path) -> None:
        self.answers: dict[str, Answer] = {}
        for _, line in iter_jsonl(recorded):
            reason = "length" if line["finish_reason"] == "length" else "stop"
            self.answers.setdefault(prompt_key(line["messages"]), (line["text"], reason))
        if not self.answers:
            raise SystemExit(f"{recorded} holds no recorded answer")

    async def answer(self, messages: list[Message], options: dict[str, Any]) -> Answer:
        try:
            return self.answers[prompt_key(messages)]
        except KeyError:
            raise LookupError("no answer was recorded for this prompt") from None

    async def pieces(self, messages: list[Message], options: dict[str, Any]) -> AsyncIterator[str]:
        text, _ = await self.answer(messages, options)
        yield text


#: What the instant upstream answers, whatever it is asked.
INSTANT_ANSWER = "I do not know."


async def instant_answer(messages: list[Message], options: dict[str, Any]) -> Answer:
    return INSTANT_ANSWER, "stop"


async def instant_pieces(messages: list[Message], options: dict[str, Any]) -> AsyncIterator[str]:
    yield INSTANT_ANSWER


def create_app(
    model_id: str,
    answer: Callable[[list[Message], dict[str, Any]], Awaitable[Answer]],
    pieces: Pieces,
    background: Callable[[], Coroutine[Any, Any, None]] | None = None,
) -> FastAPI:
    """An OpenAI-compatible chat server over ``answer`` (whole replies) and ``pieces``
    (streamed ones); ``background`` runs as long as the server does."""

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(background()) if background else None
        yield
        if task is not None:
            task.cancel()

    app = FastAPI(lifespan=lifespan)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest) -> Response:
        messages, options = body.chat_messages(), body.answer_options(DEFAULT_MAX_TOKENS)
        completion_id = f"chatcmpl-{uuid.uuid4().hex}"
        if body.stream:
            return StreamingResponse(
                _events(completion_id, model_id, pieces(messages, options)), media_type="text/event-stream"
            )
        try:
            text, finish_reason = await answer(messages, options)
        except LookupError as exc:
            return JSONResponse(error_body(str(exc), "server_error"), status_code=500)
        return JSONResponse(completion(completion_id, model_id, text, finish_reason))

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "model": model_id}

    return app


async def _events(completion_id: str, model: str, pieces: AsyncIterator[str]) -> AsyncIterator[bytes]:
    yield event(chunk(completion_id, model, {"role": "assistant", "content": ""}))
    async for piece in pieces:
        yield event(chunk(completion_id, model, {"content": piece}))
    yield event(chunk(completion_id, model, {}, "stop"))
    yield event("[DONE]")


def main() -> None:
    import uvicorn

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    kinds = parser.add_subparsers(dest="kind", required=True)
    smollm2 = kinds.add_parser("smollm2", help="the embedded SmolLM2 answers")
    smollm2.add_argument("--record", type=Path, help="append every answer to this JSONL file")
    smollm2.add_argument("--batch", type=int, default=8, help="requests generated together at most")
    replay = kinds.add_parser("replay", help="answer with recorded answers")
    replay.add_argument("recorded", type=Path, help="the JSONL file smollm2 --record wrote")
    instant = kinds.add_parser("instant", help="answer every prompt at once with the same text")
    for sub in (smollm2, replay, instant):
        sub.add_argument("--port", type=int, required=True)
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)

    if args.kind == "smollm2":
        chat = BatchingChat(LocalChatModel(), args.batch, args.record)
        chat.model.chat([{"role": "user", "content": "Hello"}], max_tokens=1)  # load before listening
        app = create_app(chat.model.model_id, chat.answer, chat.pieces, chat.run)
    elif args.kind == "replay":
        replayed = Replay(args.recorded)
        app = create_app("replay", replayed.answer, replayed.pieces)
    else:
        app = create_app("instant", instant_answer, instant_pieces)
    uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
