"""``adaptive-gates serve`` bounds what one request and one client may cost: a body past
its size (413), a message or conversation past its tokens (400
``context_length_exceeded``, at once, however long the text), more answers at once than
it takes (503 with ``Retry-After``), more requests a minute than a key may send (429
with ``Retry-After``); each as OpenAI's clients read it. A real server over HTTP (the
app in a thread, the embedded SmolLM2 answering) and the command line as a user types
it."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import threading

import httpx
import openai
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.cli import main
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.models.embedded import SMOLLM2_ID as MODEL  # the name the served embedded model answers as
from adaptive_gates.retrieval import DenseRetriever
from adaptive_gates.serve import ChatService
from adaptive_gates.serve.app import create_app
from adaptive_gates.serve.keys import KeyRing
from adaptive_gates.serve.limits import (
    ConversationTooLongError,
    Limits,
    RateLimit,
    blocking_threads,
    check_conversation,
    token_counter,
)
from support.serve_process import ServedApp

pytestmark = pytest.mark.live_server  # a real server: left out of make test-fast

QUESTION = "Who wrote Hamlet?"
LIMITS = Limits(
    max_body_bytes=20_000, max_message_tokens=50, max_conversation_tokens=80, max_answer_tokens=40, max_in_flight=1
)


@pytest.fixture(scope="module")
def gate(served_gate_dir, embedder, tmp_path_factory) -> SKRKnnGate:
    return SKRKnnGate.load(
        shutil.copytree(served_gate_dir, tmp_path_factory.mktemp("limits") / "gate"), embedder=embedder
    )


@pytest.fixture(scope="module")
def retriever(served_corpus, embedder) -> DenseRetriever:
    return DenseRetriever.from_jsonl(served_corpus, embedder)


@pytest.fixture(scope="module")
def served(gate, retriever, served_chat_model):
    service = ChatService(gate, retriever, served_chat_model, max_tokens=4, limits=LIMITS)
    with ServedApp(create_app(service)) as app:
        yield app


def _client(url: str, key: str = "no-key-needed") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0)


def _ask(client: openai.OpenAI, content: str = QUESTION, **options):
    return client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": content}], **options)


def test_a_body_past_its_size_gets_413_before_it_is_read_whole(served):
    padded = {"messages": [{"role": "user", "content": QUESTION}], "padding": "x" * 30_000}
    declared = httpx.post(f"{served.url}/v1/chat/completions", json=padded)

    def chunks():  # no Content-Length: the size is known only while reading
        yield b'{"messages": [{"role": "user", "content": "'
        for _ in range(40):
            yield b"x" * 1_000

    streamed = httpx.post(f"{served.url}/v1/chat/completions", content=chunks())
    for refused in (declared, streamed):
        assert refused.status_code == 413
        error = refused.json()["error"]
        assert error["code"] == "request_too_large" and "20000 bytes" in error["message"]
    assert _ask(_client(served.url)).choices[0].message.content.strip()


def test_a_message_or_conversation_past_its_tokens_is_refused_at_once(served, served_chat_model):
    long_message = "Tell me about Hamlet. " * 10
    tokens = served_chat_model.count_tokens(long_message)
    assert tokens > LIMITS.max_message_tokens
    flood = "Hamlet " * 2_700  # past 16 characters a token allowed: refused by its length, not tokenized
    for content, message in ((long_message, f"message 0 is {tokens} tokens"), (flood, "message 0 is more than 50")):
        with pytest.raises(openai.BadRequestError) as caught:
            _ask(_client(served.url), content, stream=True)
        error = caught.value.body
        assert error["code"] == "context_length_exceeded" and error["param"] == "messages"
        assert message in error["message"] and "this server takes 50 a message" in error["message"]
    turns = [
        {
            "role": "user",
            "content": "Who wrote the play Hamlet, the tragedy of the prince of Denmark, and when? "
            "I read it at school and remember the ghost on the walls of the castle.",
        },
        {
            "role": "assistant",
            "content": "William Shakespeare wrote Hamlet between 1599 and 1601, in London, "
            "for the Lord Chamberlain's Men, who played it at the Globe.",
        },
        {"role": "user", "content": "And where was he born, in which year, and who were his father and mother?"},
    ]
    counts = [served_chat_model.count_tokens(t["content"]) for t in turns]
    assert max(counts) <= 50 < 80 < sum(counts)
    with pytest.raises(openai.BadRequestError) as caught:
        _client(served.url).chat.completions.create(model=MODEL, messages=turns)
    # a kept chat past the bound fails every next question: the refusal says what to do
    assert "this server takes 80 a conversation: start a new chat" in caught.value.body["message"]


def test_more_messages_than_it_takes_are_refused_before_a_remote_upstream_sees_them(gate, retriever, openai_server):
    upstream = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url, max_retries=0)
    service = ChatService(gate, retriever, upstream, max_tokens=1)  # the default limits
    turns = [{"role": ("user", "assistant")[n % 2], "content": "hi"} for n in range(Limits().max_messages + 1)]
    assert Limits().max_messages == 256 and turns[-1]["role"] == "user"
    with ServedApp(create_app(service)) as app:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as caught:
                _client(app.url).chat.completions.create(model=openai_server.model_id, messages=turns, stream=stream)
            error = caught.value.body
            assert (error["code"], error["param"]) == ("too_many_messages", "messages")
            assert error["message"].startswith("the conversation holds 257 messages; this server takes 256")
        assert openai_server.requests == 0
        assert _client(app.url).chat.completions.create(model=openai_server.model_id, messages=turns[-256:])


def test_an_answer_longer_than_the_server_writes_is_refused_before_any_work(served):
    asked = LIMITS.max_answer_tokens + 1
    before = httpx.get(f"{served.url}/v1/stats").json()["stats"]["requests"]
    for field in ("max_tokens", "max_completion_tokens"):
        with pytest.raises(openai.BadRequestError) as caught:
            _client(served.url).chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": QUESTION}], **{field: asked}
            )
        error = caught.value.body
        assert (error["param"], error["code"]) == (field, "invalid_value")
        assert f"this server writes at most {LIMITS.max_answer_tokens} tokens an answer" in error["message"]
    assert httpx.get(f"{served.url}/v1/stats").json()["stats"]["requests"] == before  # not judged, nothing generated
    assert _ask(_client(served.url), max_tokens=LIMITS.max_answer_tokens).choices[0].message.content.strip()


def test_a_prompt_past_the_upstreams_window_is_the_clients_error_not_the_upstreams(gate, retriever, served_chat_model):
    # within the server's limits, past the embedded model's 8,192-token window with the answer asked for
    roomy = Limits(max_message_tokens=9_000, max_conversation_tokens=9_000)
    service = ChatService(gate, retriever, served_chat_model, max_tokens=400, limits=roomy)
    with ServedApp(create_app(service)) as app:
        for stream in (False, True):
            with pytest.raises(openai.BadRequestError) as caught:
                _ask(_client(app.url), "1 " * 3_950 + QUESTION, stream=stream)
            error = caught.value.body
            assert error["code"] == "context_length_exceeded"
            assert "past the model's context window of 8192 tokens" in error["message"]


def test_beyond_the_answers_it_takes_at_once_a_request_gets_503_and_retry_after(served):
    started, release = threading.Event(), threading.Event()

    def hold_one_answer():
        with _ask(_client(served.url), stream=True, max_tokens=LIMITS.max_answer_tokens) as stream:
            next(iter(stream))  # the answer is under way
            started.set()
            release.wait(timeout=600)

    holder = threading.Thread(target=hold_one_answer)
    holder.start()
    try:
        assert started.wait(timeout=600)
        with pytest.raises(openai.InternalServerError) as caught:
            _ask(_client(served.url))
        assert caught.value.status_code == 503 and caught.value.response.headers["retry-after"] == "1"
        assert caught.value.body["code"] == "server_overloaded"
        assert httpx.get(f"{served.url}/healthz").status_code == 200  # only answers are counted
    finally:
        release.set()
        holder.join(timeout=600)
    assert _ask(_client(served.url)).choices[0].message.content.strip()  # the slot is free again


def test_the_servers_executor_has_threads_for_every_answer_it_lets_in(gate, retriever, served_chat_model, served):
    for in_flight in (1, 8, 20):
        limits = Limits(max_in_flight=in_flight)
        executor = create_app(ChatService(gate, retriever, served_chat_model, limits=limits)).state.executor
        assert executor._max_workers == blocking_threads(limits) == 2 * in_flight + 8
    # the loop's own default on 2 cores holds min(32, 2 + 4) threads: fewer than 8 streams need
    assert blocking_threads(Limits()) > min(32, 2 + 4)
    # a request's blocking calls (the gate's scoring, the retrieval, the generation) run in it
    assert _ask(_client(served.url)).choices[0].message.content.strip()
    assert any(t.name.startswith("adaptive-gates-serve") for t in threading.enumerate())


def test_past_its_rate_a_key_gets_429_while_another_key_goes_on(gate, retriever, served_chat_model):
    keys = {"chat-key-a-0123456789abcdef": "chat", "chat-key-b-0123456789abcdef": "chat"}
    ring = KeyRing.from_sources(list(keys), environ={})
    service = ChatService(gate, retriever, served_chat_model, max_tokens=1, limits=Limits(requests_per_minute=2))
    first, second = list(keys)
    with ServedApp(create_app(service, ring)) as app:
        for _ in range(2):
            _ask(_client(app.url, first))
        with pytest.raises(openai.RateLimitError) as caught:
            _ask(_client(app.url, first))
        error = caught.value.body
        assert error["code"] == "rate_limit_exceeded" and "more than 2 requests a minute" in error["message"]
        assert int(caught.value.response.headers["retry-after"]) in range(1, 31)
        assert _ask(_client(app.url, second)).choices[0].message.content is not None
        assert httpx.get(f"{app.url}/healthz").status_code == 200


def test_a_bucket_refills_at_its_rate():
    now = [0.0]
    limit = RateLimit(app=None, per_minute=60, clock=lambda: now[0])
    assert [limit.buckets.take("a") for _ in range(60)] == [0] * 60
    assert limit.buckets.take("a") == 1 and limit.buckets.take("b") == 0  # one a second; another client is its own
    now[0] += 1.0
    assert limit.buckets.take("a") == 0 and limit.buckets.take("a") == 1
    now[0] += 120.0  # a full bucket holds no more than a minute's requests
    assert [limit.buckets.take("a") for _ in range(61)][-2:] == [0, 1]


def test_without_a_tokenizer_at_hand_tokens_are_estimated_from_the_bytes():
    remote = OpenAIChatModel("remote-model", base_url="http://127.0.0.1:9/v1")
    count = token_counter(remote)
    assert count("abc" * 10) == 10 and count("é" * 3) == 2  # 3 bytes a token, rounded up
    with pytest.raises(ConversationTooLongError, match="message 1 is 51 tokens"):
        check_conversation([{"role": "user", "content": "Hi"}, {"role": "user", "content": "x" * 153}], LIMITS, count)


def test_the_command_shows_every_default_and_refuses_a_bad_limit(capsys):
    with pytest.raises(SystemExit):
        main(["serve", "--help"])
    shown = " ".join(capsys.readouterr().out.split())
    for option, default in (
        ("--gate", "pretrained:draft-check"),
        ("--host", "127.0.0.1"),
        ("--port", "8000"),
        ("--k", "3"),
        ("--history-window", "2"),
        ("--max-tokens", "128"),
        ("--upstream-timeout", "60"),
        ("--max-body-bytes", "1000000"),
        ("--max-message-tokens", "2000"),
        ("--max-conversation-tokens", "4000"),
        ("--max-messages", "256"),
        ("--max-answer-tokens", "1024"),
        ("--max-in-flight", "8"),
        ("--rate-limit", "120"),
        ("--feedback-per-hour", "60"),
        ("--drain-seconds", "10"),
    ):
        assert option in shown and f"(default {default})" in shown.split(option, 2)[-1], option
    assert main(["serve", "--max-in-flight", "0", "--gate", "g", "--corpus", "c"]) == 2
    assert "--max-in-flight: must be a positive integer" in capsys.readouterr().err


def test_a_client_that_leaves_stops_its_generation(gate, retriever, served_chat_model):
    """A reply of 2,000 tokens holds the model for minutes; once its client is gone the
    model is free again at the next token, streamed or not."""
    model_lock = served_chat_model.lm._lock  # held while the model generates
    counting = "Write the numbers from 1 to 2000, separated by commas."  # SmolLM2 counts on and on
    body = {"messages": [{"role": "user", "content": counting}], "max_tokens": 2000}
    service = ChatService(gate, retriever, served_chat_model, limits=Limits(max_answer_tokens=2000))
    with ServedApp(create_app(service)) as app:
        url = f"{app.url}/v1/chat/completions"
        asyncio.run(_leave_once_generating(url, body, model_lock))
        assert model_lock.acquire(timeout=120)
        model_lock.release()
        with httpx.stream("POST", url, json={**body, "stream": True}, timeout=60) as streamed:
            next(streamed.iter_lines())  # the answer is under way; the client leaves
        assert model_lock.acquire(timeout=120)
        model_lock.release()


async def _leave_once_generating(url: str, body: dict, model_lock: threading.RLock) -> None:
    """Ask for ``body`` and, once the model is generating the answer (another thread
    holds its lock), give up waiting for it: the connection closes as it does when a
    client's timeout ends the wait."""
    async with httpx.AsyncClient(timeout=None) as client:
        request = asyncio.create_task(client.post(url, json=body))
        while model_lock.acquire(blocking=False):
            model_lock.release()
            assert not request.done(), "the answer ended before the model was seen generating it"
            await asyncio.sleep(0.01)
        request.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await request
