"""Which exceptions mean a chat backend gave no answer, and which of those mean it
timed out: Python's own, the HTTP clients' (real failures over a real socket) and the
openai SDK's, read through their cause / context chain."""

from __future__ import annotations

import contextlib
import socket
import threading

import httpx
import openai
import pytest

from adaptive_gates.models.chat.unavailable import is_timeout, is_unavailable


def _raised(make):
    """The exception ``make()`` raises, with its chain as Python builds it."""
    try:
        make()
    except BaseException as exc:
        return exc
    raise AssertionError("nothing was raised")


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 where nothing listens (connections are refused)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def silent_port():
    """A port on 127.0.0.1 that accepts connections and never answers."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    accepted, done = [], threading.Event()

    def accept():
        server.settimeout(0.2)
        while not done.is_set():
            with contextlib.suppress(OSError):
                accepted.append(server.accept()[0])

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    done.set()
    thread.join()
    for conn in accepted:
        conn.close()
    server.close()


@pytest.mark.parametrize(
    ("exc", "unavailable", "timeout"),
    [
        (TimeoutError("slow"), True, True),
        (ConnectionRefusedError("refused"), True, False),
        (ConnectionResetError("reset"), True, False),
        (ValueError("bad reply"), False, False),
        (RuntimeError("boom"), False, False),
    ],
)
def test_python_exceptions(exc, unavailable, timeout):
    assert is_unavailable(exc) is unavailable
    assert is_timeout(exc) is timeout


def test_a_refused_httpx_connection_is_unavailable_but_no_timeout(closed_port):
    exc = _raised(lambda: httpx.get(f"http://127.0.0.1:{closed_port}/", timeout=5))
    assert isinstance(exc, httpx.ConnectError)
    assert is_unavailable(exc)
    assert not is_timeout(exc)


def test_a_silent_server_times_out_an_httpx_request(silent_port):
    exc = _raised(lambda: httpx.get(f"http://127.0.0.1:{silent_port}/", timeout=0.2))
    assert isinstance(exc, httpx.TimeoutException)
    assert is_unavailable(exc)
    assert is_timeout(exc)


def test_the_openai_sdk_failures_over_a_real_socket(closed_port, silent_port):
    def ask(port, timeout):
        client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="x", max_retries=0, timeout=timeout)
        return client.chat.completions.create(model="m", messages=[{"role": "user", "content": "hi"}])

    refused = _raised(lambda: ask(closed_port, 5))
    assert isinstance(refused, openai.APIConnectionError)
    assert not isinstance(refused, openai.APITimeoutError)
    assert is_unavailable(refused) and not is_timeout(refused)

    timed_out = _raised(lambda: ask(silent_port, 0.2))
    assert isinstance(timed_out, openai.APITimeoutError)
    assert is_unavailable(timed_out) and is_timeout(timed_out)


def test_a_wrapped_failure_is_read_through_its_cause_and_context():
    def wrapped_by_cause():
        try:
            raise TimeoutError("slow")
        except TimeoutError as exc:
            raise RuntimeError("the framework's own error") from exc

    def wrapped_by_context():
        try:
            raise ConnectionRefusedError("refused")
        except ConnectionRefusedError:
            raise KeyError("while handling it")  # noqa: B904

    by_cause = _raised(wrapped_by_cause)
    assert is_unavailable(by_cause) and is_timeout(by_cause)
    by_context = _raised(wrapped_by_context)
    assert by_context.__context__ is not None
    assert is_unavailable(by_context) and not is_timeout(by_context)


def test_an_http_error_reply_decides_before_a_timeout_earlier_in_the_chain():
    request = httpx.Request("POST", "http://127.0.0.1/v1/chat/completions")
    response = httpx.Response(500, request=request)

    def server_error_after_a_retried_timeout():
        try:
            raise httpx.ReadTimeout("first attempt timed out", request=request)
        except httpx.ReadTimeout:
            raise openai.InternalServerError("server error", response=response, body=None)  # noqa: B904

    exc = _raised(server_error_after_a_retried_timeout)
    assert isinstance(exc.__context__, httpx.ReadTimeout)
    assert not is_unavailable(exc)
    assert not is_timeout(exc)

    status = httpx.HTTPStatusError("500", request=request, response=response)
    status.__cause__ = TimeoutError("earlier")
    assert not is_unavailable(status)


def test_a_cyclic_chain_ends():
    a, b = ValueError("a"), ValueError("b")
    a.__context__, b.__context__ = b, a
    assert not is_unavailable(a)
    assert not is_timeout(a)
