"""OpenAIChatModel against a real OpenAI-compatible HTTP server on 127.0.0.1 (the embedded
SmolLM2 behind ``support/openai_server.py``), and once against a live endpoint when one is configured."""

from __future__ import annotations

import asyncio
import os
import re
import socket
import threading
import time

import pytest

from adaptive_gates import SKRPromptGate, VerbalizedGate
from adaptive_gates.errors import BackendError, BackendUnavailableError
from adaptive_gates.gates.base.asking import ChatBackend
from adaptive_gates.models import (
    ChatChunk,
    ChatModel,
    ChatReply,
    LocalChatModel,
    OpenAIChatModel,
    StreamingChatModel,
    achat_each,
    chat_each,
    chat_many,
)
from support.openai_server import ChatCompletionsServer, Fault

FRANCE = [{"role": "user", "content": "What is the capital of France?"}]
QUESTIONS = [
    FRANCE,
    [{"role": "user", "content": "Name a primary colour."}],
    [{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "What is 2 + 2?"}],
]


@pytest.fixture
def local(openai_server: ChatCompletionsServer) -> LocalChatModel:
    """The model the server answers with, called directly."""
    return openai_server.chat_model


def remote(server: ChatCompletionsServer, **options: object) -> OpenAIChatModel:
    return OpenAIChatModel(server.model_id, base_url=server.base_url, **options)


def openai_style(reply: ChatReply) -> ChatReply:
    """``reply`` with the local model's finish reason as OpenAI names it (its token
    usage travels as OpenAI's ``usage`` object)."""
    finish = "length" if reply.finish_reason == "length" else "stop"
    return ChatReply(reply.text, reply.tokens, finish, reply.usage)


def test_is_a_chat_model(openai_server: ChatCompletionsServer) -> None:
    model = remote(openai_server)
    assert isinstance(model, ChatModel)
    assert model.model_id == openai_server.model_id


def test_server_lists_its_model(openai_server: ChatCompletionsServer, openai_base_url: str) -> None:
    import openai

    listed = openai.OpenAI(base_url=openai_base_url, api_key="any").models.list()
    assert [m.id for m in listed.data] == [openai_server.model_id]


def test_greedy_reply_matches_the_local_model(openai_server, openai_base_url, local) -> None:
    reply = remote(openai_server).chat(FRANCE, max_tokens=8)
    assert reply == openai_style(local.chat(FRANCE, max_tokens=8))
    assert "Paris" in reply.text and reply.tokens is None
    assert openai_server.requests == 1


def test_logprobs_arrive_as_token_logprobs(openai_server, openai_base_url, local) -> None:
    reply = remote(openai_server).chat(FRANCE, max_tokens=6, top_logprobs=3)
    assert reply == openai_style(local.chat(FRANCE, max_tokens=6, top_logprobs=3))
    assert len(reply.tokens) == 6
    for token in reply.tokens:
        assert len(token.top) == 3 and token.logprob <= 0
        assert token.top[0] == (token.token, token.logprob)  # greedy: the best alternative
        assert [lp for _, lp in token.top] == sorted((lp for _, lp in token.top), reverse=True)


def test_stop_strings_are_honoured(openai_server, openai_base_url, local) -> None:
    full = local.chat(FRANCE, max_tokens=8).text
    stop = " " + full.split()[2]
    expected = full[: full.index(stop)]
    model = remote(openai_server)
    for given in (stop, [stop, "\n\n"]):
        reply = model.chat(FRANCE, max_tokens=8, stop=given)
        assert (reply.text, reply.finish_reason) == (expected, "stop")


def test_a_streamed_reply_adds_up_to_the_whole_one(openai_server, openai_base_url, local) -> None:
    model = remote(openai_server)
    assert isinstance(model, StreamingChatModel)
    pieces = list(model.stream(FRANCE, max_tokens=8))
    whole = model.chat(FRANCE, max_tokens=8)
    assert len(pieces) > 3 and all(p.reply is None for p in pieces[:-1])
    assert "".join(p.text for p in pieces) == pieces[-1].reply.text == whole.text
    assert pieces[-1].reply.finish_reason == whole.finish_reason

    async def streamed() -> list[ChatChunk]:
        return [piece async for piece in model.astream(FRANCE, max_tokens=8)]

    assert [p.text for p in asyncio.run(streamed())] == [p.text for p in pieces]


@pytest.mark.parametrize(("fault", "error"), [(Fault.ERROR_500, BackendError), (Fault.MALFORMED_JSON, BackendError)])
def test_a_failed_stream_is_a_backend_error(openai_server, openai_base_url, fault, error) -> None:
    openai_server.set_fault(fault)
    with pytest.raises(error, match="chat model"):
        list(remote(openai_server, max_retries=0).stream(FRANCE, max_tokens=4))


def test_chat_many_over_two_threads(openai_server, openai_base_url, local) -> None:
    replies = chat_many(remote(openai_server), QUESTIONS, max_workers=2, max_tokens=6)
    assert replies == [openai_style(local.chat(q, max_tokens=6)) for q in QUESTIONS]
    assert openai_server.requests == len(QUESTIONS)


def test_achat_in_concurrent_tasks_and_separate_loops(openai_server, openai_base_url, local) -> None:
    model = remote(openai_server)

    async def ask_all() -> list[ChatReply]:
        return list(await asyncio.gather(*(model.achat(q, max_tokens=6) for q in QUESTIONS[:2])))

    expected = [openai_style(local.chat(q, max_tokens=6)) for q in QUESTIONS[:2]]
    assert asyncio.run(ask_all()) == expected
    assert asyncio.run(ask_all()) == expected  # a new event loop gets its own HTTP client
    assert openai_server.requests == 4


@pytest.mark.parametrize(
    ("fault", "cause", "attempts"),
    [
        (Fault.ERROR_500, "HTTP 500", 2),
        (Fault.SLOW, "timed out", 2),
        (Fault.HANG, "timed out", 2),
        (Fault.MALFORMED_JSON, "malformed JSON", 1),
        (Fault.EMPTY_CHOICES, "no choices", 1),
        (Fault.NO_CONTENT, "no text content", 1),
    ],
)
def test_faults_end_in_backend_error_after_bounded_retries(
    openai_server, openai_base_url, fault, cause, attempts
) -> None:
    # Only a held-back reply needs a timeout shorter than the server's delay.
    held_back = fault in (Fault.SLOW, Fault.HANG)
    model = remote(openai_server, timeout=0.5 if held_back else 10.0, max_retries=1)
    openai_server.set_fault(fault)
    with pytest.raises(BackendError, match=cause) as caught:
        model.chat(FRANCE, max_tokens=2)
    assert openai_server.model_id in str(caught.value) and openai_base_url in str(caught.value)
    # A server that does not answer is unavailable; one that answers badly is not.
    assert isinstance(caught.value, BackendUnavailableError) == held_back
    assert openai_server.requests == attempts


def test_async_fault_ends_in_backend_error(openai_server, openai_base_url) -> None:
    model = remote(openai_server, timeout=10.0, max_retries=1)
    openai_server.set_fault(Fault.ERROR_500)
    with pytest.raises(BackendError, match="HTTP 500"):
        asyncio.run(model.achat(FRANCE, max_tokens=2))
    assert openai_server.requests == 2


def test_client_errors_are_not_retried(openai_server, openai_base_url) -> None:
    model = OpenAIChatModel("no-such-model", base_url=openai_base_url, max_retries=2)
    with pytest.raises(BackendError, match=r"HTTP 404.*no-such-model"):
        model.chat(FRANCE, max_tokens=2)
    assert openai_server.requests == 1


def test_unreachable_server_is_a_backend_error() -> None:
    with socket.socket() as sock:  # a port that nothing listens on once closed
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    model = OpenAIChatModel("m", base_url=f"http://127.0.0.1:{port}/v1", max_retries=0)
    with pytest.raises(BackendUnavailableError, match=f"127.0.0.1:{port}.*cannot connect"):
        model.chat(FRANCE)


def test_the_api_key_stays_out_of_errors(openai_server, openai_base_url) -> None:
    secret = "sk-test-do-not-print-0123456789"
    model = remote(openai_server, api_key=secret, max_retries=0)
    openai_server.set_fault(Fault.ERROR_500)
    with pytest.raises(BackendError) as caught:
        model.chat(FRANCE)
    assert secret not in str(caught.value) and secret not in repr(model)


def test_close_joins_the_request_in_progress(openai_server) -> None:
    """A reply still being generated when the server closes is finished, not left to a
    thread that the interpreter would kill inside torch at exit (which aborts it)."""
    before = set(threading.enumerate())
    server = ChatCompletionsServer(openai_server.chat_model).start()
    server.set_fault(Fault.SLOW)
    story = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
    with pytest.raises(BackendUnavailableError, match="timed out"):
        # Sixteen tokens are still being generated long after the client gave up at 0.1 s.
        remote(server, timeout=0.1, max_retries=0).chat(story, max_tokens=16)
    server.close()
    assert [t for t in threading.enumerate() if t not in before] == []


def test_chat_many_stops_sending_to_a_dead_server(openai_server, openai_base_url) -> None:
    openai_server.set_fault(Fault.HANG)
    with pytest.raises(BackendUnavailableError, match="timed out"):
        chat_many(remote(openai_server, timeout=0.5, max_retries=0), QUESTIONS, max_workers=2, max_tokens=2)
    assert openai_server.requests == 2  # the two first went out together; the third never did


def test_a_dead_server_costs_one_retry_cycle_per_batch(openai_server, openai_base_url) -> None:
    openai_server.set_fault(Fault.HANG)
    gate = SKRPromptGate(remote(openai_server, timeout=0.5, max_retries=1), deadline=None)
    decisions = gate.decide_batch(["Who wrote Hamlet?", "What is 2 + 2?", "Name a primary colour."])
    assert openai_server.requests == 2  # the first question's attempt and its retry, nothing after
    assert all(d.is_fallback and d.retrieve for d in decisions)
    assert "timed out" in decisions[0].error
    assert all("not asked after an earlier request found it unavailable" in d.error for d in decisions[1:])


def test_one_deadline_bounds_a_whole_batch(openai_server, openai_base_url) -> None:
    """A server that accepts requests and never answers costs a decision its deadline,
    however many questions the batch holds and however long the client would wait."""
    openai_server.set_fault(Fault.HANG)
    deadline = 1.0
    # No retries, so the requests left behind at the deadline end when the server is reset.
    gate = VerbalizedGate(remote(openai_server, timeout=60.0, max_retries=0), max_workers=2, deadline=deadline)
    start = time.monotonic()
    decisions = gate.decide_batch([f"What is {n} + {n}?" for n in range(6)])
    elapsed = time.monotonic() - start
    assert openai_server.requests == 2  # the two in flight at the deadline; nothing sent after
    assert all(d.is_fallback and d.retrieve and "before the deadline" in d.error for d in decisions)
    assert elapsed < 10 * deadline  # generous: without the deadline it would be 60 s or more


def test_requests_of_one_decision_share_its_deadline(openai_server, openai_base_url) -> None:
    """A follow-up round (the judgement prompt) gets what is left of the deadline, not a new one."""
    model = remote(openai_server, timeout=60.0, max_retries=0)
    # The client is built and connected outside the deadline under test (slow on a busy machine).
    assert isinstance(ChatBackend(model, deadline=60.0).ask([FRANCE], max_tokens=2)[0], ChatReply)
    backend = ChatBackend(model, deadline=0.5)
    openai_server.reset()
    openai_server.set_fault(Fault.HANG)
    with backend.shared_deadline():
        first = backend.ask([FRANCE], max_tokens=2)
        follow_up = backend.ask([FRANCE], max_tokens=2)
    assert openai_server.requests == 1
    for replies in (first, follow_up):
        assert isinstance(replies[0], BackendUnavailableError) and "before the deadline" in str(replies[0])


@pytest.mark.parametrize("deadline", [0, -1.0, float("inf"), float("nan"), "10", True])
def test_bad_deadlines_are_refused(deadline) -> None:
    with pytest.raises(ValueError, match="deadline"):
        ChatBackend(None, deadline=deadline)
    with pytest.raises(ValueError, match="deadline"):
        VerbalizedGate(deadline=deadline)


@pytest.mark.parametrize(
    ("messages", "options"),
    [
        ([], {}),
        ("What is the capital of France?", {}),
        ([{"role": "robot", "content": "hi"}], {}),
        ([{"role": "user", "content": 3}], {}),
        (FRANCE, {"max_tokens": 0}),
        (FRANCE, {"temperature": -1.0}),
        (FRANCE, {"temperature": float("nan")}),
        (FRANCE, {"top_logprobs": -1}),
        (FRANCE, {"stop": [""]}),
    ],
)
def test_bad_input_raises_before_any_request(openai_server, openai_base_url, messages, options) -> None:
    with pytest.raises(ValueError):
        remote(openai_server).chat(messages, **options)
    assert openai_server.requests == 0


@pytest.mark.parametrize(
    "options", [{"timeout": 0}, {"timeout": float("inf")}, {"max_retries": -1}, {"max_retries": 1.5}]
)
def test_bad_settings_are_refused(options) -> None:
    with pytest.raises(ValueError):
        OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", **options)


def test_a_timeout_is_at_most_a_day() -> None:
    assert OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", timeout=86400).timeout == 86400.0
    for huge in (86400.5, 1e308):
        with pytest.raises(ValueError, match=r"timeout must be a positive number of seconds, at most 86400 \(a day\)"):
            OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1", timeout=huge)


@pytest.mark.parametrize(
    "base_url",
    [
        "not a url",
        "localhost:8000/v1",
        "ftp://127.0.0.1/v1",
        "http://",
        "http://127.0.0.1:port/v1",
        "http://[::1/v1",
        8000,
    ],
)
def test_a_base_url_that_is_not_one_is_refused_naming_it(base_url) -> None:
    with pytest.raises(ValueError, match=f"base URL {re.escape(repr(base_url))} is not an http\\(s\\) URL with a host"):
        OpenAIChatModel("m", base_url=base_url)


@pytest.mark.parametrize("base_url", ["http://127.0.0.1:9/v1", "https://api.example.com/v1", "HTTP://[::1]:8000"])
def test_http_base_urls_with_a_host_are_taken(base_url) -> None:
    assert OpenAIChatModel("m", base_url=base_url).base_url == base_url


def test_a_key_is_required_only_for_the_default_endpoint(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(BackendError, match="OPENAI_API_KEY"):
        OpenAIChatModel("m")
    OpenAIChatModel("m", base_url="http://127.0.0.1:9/v1")
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:9/v1")
    OpenAIChatModel("m")


LIVE_ENDPOINT = bool(os.environ.get("OPENAI_API_KEY") or os.environ.get("OPENAI_BASE_URL"))


@pytest.mark.skipif(
    not LIVE_ENDPOINT,
    reason="live endpoint test: set OPENAI_API_KEY and/or OPENAI_BASE_URL (model: OPENAI_MODEL, "
    "default gpt-4o-mini) to run it against a real, possibly paid, OpenAI-compatible endpoint",
)
def test_live_endpoint_answers() -> None:
    model = OpenAIChatModel(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), timeout=60.0)
    reply = model.chat([{"role": "user", "content": "What is the capital of France? One word."}], max_tokens=16)
    assert reply.text.strip()
    assert reply.finish_reason in ("stop", "length")


@pytest.mark.skipif(
    not LIVE_ENDPOINT,
    reason="live endpoint test: set OPENAI_API_KEY and/or OPENAI_BASE_URL (model: OPENAI_MODEL)",
)
def test_live_endpoint_behind_the_verbalized_gate() -> None:
    from adaptive_gates import VerbalizedGate

    model = OpenAIChatModel(os.environ.get("OPENAI_MODEL", "gpt-4o-mini"), timeout=60.0)
    decision = VerbalizedGate(model).decide("What is the capital of France?")
    assert not decision.is_fallback, decision.error
    assert decision.details["certainty"] in ("certain", "uncertain")
    if not decision.retrieve:
        assert "paris" in decision.draft_answer.lower()


def test_nothing_is_sent_once_the_deadline_has_passed() -> None:
    """A follow-up asked after the shared deadline sends no request, whichever thread
    would have been first (it used to depend on a race with the waiting caller)."""

    class Counting:
        model_id = "counting"
        calls = 0

        def chat(self, messages, **options):
            Counting.calls += 1
            return ChatReply("Paris")

    past = time.monotonic() - 1.0
    for replies in (
        chat_each(Counting(), [FRANCE, FRANCE], deadline=past),
        asyncio.run(achat_each(Counting(), [FRANCE, FRANCE], deadline=past)),
    ):
        assert all(isinstance(r, BackendUnavailableError) and "before the deadline" in str(r) for r in replies)
    assert Counting.calls == 0
