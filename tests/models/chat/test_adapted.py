"""AdaptedChatModel: a framework's chat model behind the core's ChatModel protocol."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import httpx2
import openai
import pytest

from adaptive_gates import BackendError, BackendUnavailableError
from adaptive_gates.models import AdaptedChatModel, ChatModel, LocalChatModel, ResolvedChatOptions

QUESTION = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]


class Framework(AdaptedChatModel):
    """A 'framework' whose model is the embedded SmolLM2, called with the options it was sent."""

    def __init__(self, llm: Any, **kwargs: Any) -> None:
        super().__init__(llm, **kwargs)
        self.sent: list[dict[str, Any]] = []

    def _default_model_id(self) -> str:
        return f"framework:{self.llm.model_id}"

    def _send(self, turns, stops, options):
        self.sent.append(options)
        if isinstance(self.llm, Exception):
            raise self.llm
        options = {k: v for k, v in options.items() if k != "logprobs"}  # the core asks by top_logprobs alone
        return self.llm.chat(turns, stop=stops or None, **options)

    async def _asend(self, turns, stops, options):
        return await asyncio.to_thread(self._send, turns, stops, options)

    def _reply(self, response, top_logprobs, stops):
        return response


@pytest.fixture(scope="module")
def local(lm) -> LocalChatModel:
    return LocalChatModel(lm)


def test_replies_and_options_pass_through(local):
    adapted = Framework(local)
    assert isinstance(adapted, ChatModel) and adapted.model_id == f"framework:{local.model_id}"
    reply = adapted.chat(QUESTION, max_tokens=4, top_logprobs=2)
    assert reply == local.chat(QUESTION, max_tokens=4, top_logprobs=2)
    assert adapted.sent[-1] == {"max_tokens": 4, "temperature": 0.0, "logprobs": True, "top_logprobs": 2}
    assert asyncio.run(adapted.achat(QUESTION, max_tokens=4)).text == local.chat(QUESTION, max_tokens=4).text
    quiet = Framework(local, pass_options=False, request_logprobs=False, model_id="mine")
    quiet.chat(QUESTION, max_tokens=4, top_logprobs=2)
    assert quiet.sent == [{}] and quiet.model_id == "mine"


@pytest.mark.parametrize(
    "failure, raised, hint",
    [
        (ConnectionError("refused"), BackendUnavailableError, "refused"),
        (TimeoutError("no answer"), BackendUnavailableError, "no answer"),
        (TypeError("unexpected keyword 'logprobs'"), BackendError, "pass_options=False"),
        (RuntimeError("bad gateway"), BackendError, "bad gateway"),
    ],
)
def test_failures_become_backend_errors(failure, raised, hint):
    adapted = Framework(failure, model_id="down")
    with pytest.raises(raised, match=hint):
        adapted.chat(QUESTION)
    with pytest.raises(raised, match=hint):
        asyncio.run(adapted.achat(QUESTION))


REQUEST = httpx2.Request("POST", "http://127.0.0.1:9/v1/chat/completions")


def raised(outer: BaseException, inner: BaseException, *, explicit: bool = True) -> BaseException:
    """``outer`` as a framework raises it while handling ``inner``: ``raise outer from
    inner`` (``explicit``) or a bare ``raise outer`` inside the ``except``."""
    try:
        try:
            raise inner
        except BaseException as exc:
            if explicit:
                raise outer from exc
            raise outer  # noqa: B904 - the implicit context is what is tested
    except BaseException as exc:
        return exc


@pytest.mark.parametrize(
    "failure, raised_as",
    [
        (openai.APITimeoutError(request=REQUEST), BackendUnavailableError),
        (openai.APIConnectionError(request=REQUEST), BackendUnavailableError),
        (httpx2.ConnectError("connection refused"), BackendUnavailableError),
        (httpx.ReadTimeout("timed out"), BackendUnavailableError),
        (raised(RuntimeError("model call failed"), openai.APITimeoutError(request=REQUEST)), BackendUnavailableError),
        (
            raised(RuntimeError("model call failed"), httpx2.ConnectTimeout("timed out"), explicit=False),
            BackendUnavailableError,
        ),
        # The server answered (HTTP 500) after an earlier attempt timed out: it is up.
        (
            raised(
                openai.InternalServerError("boom", response=httpx2.Response(500, request=REQUEST), body=None),
                openai.APITimeoutError(request=REQUEST),
                explicit=False,
            ),
            BackendError,
        ),
        (httpx2.HTTPStatusError("boom", request=REQUEST, response=httpx2.Response(503, request=REQUEST)), BackendError),
        (raised(RuntimeError("bad gateway"), ValueError("not JSON")), BackendError),
    ],
)
def test_provider_sdk_failures_are_told_apart(failure, raised_as):
    """The SDKs' timeouts and connection failures subclass neither TimeoutError nor
    ConnectionError; they, and frameworks' wrappers of them, still mean no answer."""
    adapted = Framework(failure, model_id="sdk")
    for call in (adapted.chat, lambda question: asyncio.run(adapted.achat(question))):
        with pytest.raises(BackendError) as caught:
            call(QUESTION)
        assert type(caught.value) is raised_as and f"sdk failed: {type(failure).__name__}" in str(caught.value)


@pytest.mark.parametrize(
    "messages, options, error",
    [
        ([{"role": "wizard", "content": "hi"}], {}, "role must be one of"),
        (QUESTION, {"max_tokens": 0}, "max_tokens must be an int >= 1"),
        (QUESTION, {"temperature": float("nan")}, "temperature must be >= 0"),
        (QUESTION, {"top_logprobs": True}, "top_logprobs must be an int >= 0"),
        (QUESTION, {"stop": [""]}, "stop strings must be non-empty"),
    ],
)
def test_malformed_messages_or_options_are_refused_before_the_model_is_asked(messages, options, error):
    adapted = Framework(RuntimeError("must not be asked"), model_id="x")
    with pytest.raises(ValueError, match=error):
        adapted.chat(messages, **options)
    with pytest.raises(TypeError, match="max_token"):
        adapted.chat(QUESTION, max_token=8)  # type: ignore[call-arg]  # a misspelt option is not ignored
    assert adapted.sent == []


def test_options_not_given_are_the_documented_defaults():
    assert ResolvedChatOptions() == ResolvedChatOptions(max_tokens=64, temperature=0.0, top_logprobs=0, stop=None)
    assert ResolvedChatOptions(stop="\n").stops == ("\n",) and ResolvedChatOptions(stop=[]).stops == ()
