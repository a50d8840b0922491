"""Asking a chat model many conversations: chat_many, chat_each and achat_each.

Models of one's own show the dispatch rules (order, one failure per slot, stopping
once the backend is unavailable, deadlines, workers); the real server over the
embedded SmolLM2 and a real refused connection show them on the OpenAI client."""

from __future__ import annotations

import asyncio
import contextvars
import socket
import threading
import time

import pytest

from adaptive_gates.errors import BackendUnavailableError
from adaptive_gates.models.chat.base import ChatReply, ResolvedChatOptions, user
from adaptive_gates.models.chat.batch import achat_each, chat_each, chat_many
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel

WHO = contextvars.ContextVar("who", default="nobody")


class EchoChat:
    """Replies with the last message's first ``max_tokens`` words. A message naming an
    exception (``"raise ValueError"``) raises it instead; ``"wait"`` blocks until
    ``release`` is set. It counts the calls and the most it ran at once."""

    def __init__(self) -> None:
        self.asked: list[str] = []
        self.release = threading.Event()
        self.running = 0
        self.most_running = 0
        self.contexts: list[str] = []
        self._lock = threading.Lock()

    @property
    def model_id(self) -> str:
        return "echo"

    def chat(self, messages, **options) -> ChatReply:
        asked = ResolvedChatOptions(**options)
        text = messages[-1]["content"]
        with self._lock:
            self.asked.append(text)
            self.contexts.append(WHO.get())
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if text.startswith("raise "):
                raise {
                    "ValueError": ValueError,
                    "ConnectionError": ConnectionRefusedError,
                    "TimeoutError": TimeoutError,
                }[text.split()[1]](text)
            if text == "wait":
                self.release.wait(10)
            else:
                time.sleep(0.01)  # long enough for workers to overlap
            return ChatReply(" ".join(text.split()[: asked.max_tokens]))
        finally:
            with self._lock:
                self.running -= 1


class AsyncEchoChat(EchoChat):
    """``EchoChat`` with a native ``achat``; ``"wait"`` awaits until cancelled."""

    def __init__(self) -> None:
        super().__init__()
        self.cancelled = 0

    async def achat(self, messages, **options) -> ChatReply:
        text = messages[-1]["content"]
        with self._lock:
            self.running += 1
            self.most_running = max(self.most_running, self.running)
        try:
            if text == "wait":
                try:
                    await asyncio.sleep(30)
                except asyncio.CancelledError:
                    self.cancelled += 1
                    raise
            await asyncio.sleep(0.01)
        finally:
            with self._lock:
                self.running -= 1
        return self.chat(messages, **options)


class BatchingChat(EchoChat):
    """``EchoChat`` with its own ``chat_batch``, which tags its replies."""

    def chat_batch(self, conversations, **options):
        return [ChatReply("batched: " + self.chat(c, **options).text) for c in conversations]


def _texts(results):
    return [r.text if isinstance(r, ChatReply) else type(r).__name__ for r in results]


# ---------------------------------------------------------------------- chat_many


def test_chat_many_replies_in_order_over_threads():
    model = EchoChat()
    questions = [f"question {i}" for i in range(6)]
    replies = chat_many(model, [user(q) for q in questions], max_workers=3, max_tokens=2)
    assert [r.text for r in replies] == questions
    assert model.most_running > 1


def test_chat_many_hands_the_whole_list_to_a_backend_that_batches():
    replies = chat_many(BatchingChat(), [user("a b"), user("c d")], max_tokens=1)
    assert [r.text for r in replies] == ["batched: a", "batched: c"]


def test_chat_many_raises_the_first_failure():
    with pytest.raises(ValueError, match="raise ValueError"):
        chat_many(EchoChat(), [user("fine"), user("raise ValueError"), user("fine too")])


def test_chat_many_batches_on_the_local_model(served_chat_model):
    replies = chat_many(served_chat_model, [user("Say hi."), user("Name a colour.")], max_tokens=2)
    assert len(replies) == 2
    for reply in replies:
        assert reply.usage is not None and 1 <= reply.usage.completion_tokens <= 2
        assert reply.finish_reason in {"length", "eos", "stop"}


# ---------------------------------------------------------------------- chat_each


def test_chat_each_keeps_each_failure_in_its_slot():
    results = chat_each(EchoChat(), [user("a"), user("raise ValueError"), user("c")])
    assert _texts(results) == ["a", "ValueError", "c"]
    assert str(results[1]) == "raise ValueError"


@pytest.mark.parametrize("failure", ["ConnectionError", "TimeoutError"])
def test_chat_each_stops_sending_once_the_backend_is_unavailable(failure):
    model = EchoChat()
    results = chat_each(model, [user("a"), user(f"raise {failure}"), user("c"), user("d")])
    assert model.asked == ["a", f"raise {failure}"]  # nothing sent after it
    assert _texts(results[:2]) == ["a", "ConnectionRefusedError" if failure == "ConnectionError" else "TimeoutError"]
    for result in results[2:]:
        assert isinstance(result, BackendUnavailableError)
        assert "'echo' not asked after an earlier request found it unavailable" in str(result)


def test_chat_each_abandons_requests_still_running_at_the_deadline():
    model = EchoChat()
    start = time.monotonic()
    try:
        results = chat_each(model, [user("wait"), user("b"), user("c")], deadline=start + 0.3)
    finally:
        model.release.set()
    assert time.monotonic() - start < 5
    assert isinstance(results[0], BackendUnavailableError)
    assert "gave no reply before the deadline" in str(results[0])
    assert all(isinstance(r, BackendUnavailableError) for r in results[1:])  # never sent
    assert model.asked == ["wait"]


def test_chat_each_sends_nothing_past_the_deadline():
    model = EchoChat()
    results = chat_each(model, [user("a"), user("b")], deadline=time.monotonic() - 1)
    assert model.asked == []
    assert all(isinstance(r, BackendUnavailableError) for r in results)


def test_chat_each_runs_workers_in_the_callers_context():
    model = EchoChat()
    token = WHO.set("caller")
    try:
        chat_each(model, [user(str(i)) for i in range(4)], max_workers=2)
    finally:
        WHO.reset(token)
    assert model.contexts == ["caller"] * 4
    assert model.most_running <= 2


def test_chat_each_of_nothing_and_bad_workers():
    assert chat_each(EchoChat(), []) == []
    with pytest.raises(ValueError, match="max_workers must be >= 1"):
        chat_each(EchoChat(), [user("a")], max_workers=0)


def test_chat_each_over_the_openai_client_and_a_real_server(openai_base_url, served_chat_model):
    model = OpenAIChatModel(served_chat_model.model_id, base_url=openai_base_url, max_retries=0)
    results = chat_each(model, [user("Say hi."), user("Say bye.")], max_workers=2, max_tokens=2)
    assert all(isinstance(r, ChatReply) for r in results), results
    assert results[0].text == served_chat_model.chat(user("Say hi."), max_tokens=2).text


def test_chat_each_stops_at_a_refused_connection():
    with socket.socket() as sock:  # a port where nothing listens
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5)
    results = chat_each(model, [user("a"), user("b"), user("c")])
    assert all(isinstance(r, BackendUnavailableError) for r in results)
    assert "not asked" not in str(results[0])
    assert all("not asked after an earlier request" in str(r) for r in results[1:])


# --------------------------------------------------------------------- achat_each


def test_achat_each_keeps_order_and_bounds_requests_in_flight():
    model = AsyncEchoChat()
    questions = [f"q{i}" for i in range(7)]
    results = asyncio.run(achat_each(model, [user(q) for q in questions], max_workers=3))
    assert _texts(results) == questions
    assert 1 < model.most_running <= 3


def test_achat_each_asks_a_model_without_achat_in_threads():
    model = EchoChat()
    results = asyncio.run(achat_each(model, [user("a b"), user("raise ValueError")], max_workers=2, max_tokens=1))
    assert _texts(results) == ["a", "ValueError"]


def test_achat_each_stops_once_the_backend_is_unavailable():
    model = AsyncEchoChat()
    results = asyncio.run(achat_each(model, [user("raise ConnectionError"), user("b"), user("c")]))
    assert model.asked == ["raise ConnectionError"]
    assert all(isinstance(r, BackendUnavailableError) for r in results[1:])


def test_achat_each_cancels_requests_running_at_the_deadline():
    model = AsyncEchoChat()
    start = time.monotonic()
    results = asyncio.run(achat_each(model, [user("wait"), user("b")], max_workers=2, deadline=start + 0.3))
    assert time.monotonic() - start < 5
    assert model.cancelled == 1
    assert isinstance(results[0], BackendUnavailableError)
    assert "before the deadline" in str(results[0])
    assert _texts(results[1:]) == ["b"]


def test_achat_each_of_nothing_and_bad_workers():
    assert asyncio.run(achat_each(AsyncEchoChat(), [])) == []
    with pytest.raises(ValueError, match="max_workers"):
        asyncio.run(achat_each(AsyncEchoChat(), [user("a")], max_workers=0))
