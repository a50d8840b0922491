"""OpenAI's chat-completions shapes as the server reads and writes them."""

from __future__ import annotations

import pytest
from openai.types.chat import ChatCompletion, ChatCompletionChunk
from pydantic import ValidationError

from adaptive_gates.models.chat.base import TokenUsage
from adaptive_gates.serve.protocol import (
    EXTENSION_FIELD,
    ChatCompletionRequest,
    FeedbackRequest,
    chunk,
    completion,
    event,
    usage_field,
)


def request(**fields):
    return ChatCompletionRequest.model_validate(
        {"messages": [{"role": "user", "content": "Who wrote Hamlet?"}], **fields}
    )


def test_messages_are_read_as_text_with_developer_as_system():
    req = ChatCompletionRequest.model_validate(
        {
            "model": "gpt-4o",
            "messages": [
                {"role": "developer", "content": "Be brief."},
                {
                    "role": "user",
                    "content": [{"type": "text", "text": "Who wrote "}, {"type": "text", "text": "Hamlet?"}],
                },
                {"role": "assistant", "content": None},
            ],
            "presence_penalty": 0.5,  # a sampling option the server does not pass on: accepted
        }
    )
    assert req.chat_messages() == [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Who wrote Hamlet?"},
        {"role": "assistant", "content": ""},
    ]
    assert req.unsupported_field() is None


def test_what_cannot_be_served_is_refused():
    with pytest.raises(ValidationError, match=r"only n=1 is served"):
        request(n=2)
    with pytest.raises(ValidationError, match=r"stop strings must not be empty"):
        request(stop=["\n", ""])
    with pytest.raises(ValidationError):
        request(messages=[])
    with pytest.raises(ValidationError):
        request(max_tokens=0)
    with pytest.raises(ValidationError):
        request(temperature=3)
    image = request(messages=[{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}])
    with pytest.raises(ValueError, match=r"only text content is served, got parts of type image_url"):
        image.chat_messages()
    surrogate = request(messages=[{"role": "user", "content": "bad \ud800 text"}])
    with pytest.raises(ValueError, match=r"message 0"):
        surrogate.chat_messages()


@pytest.mark.parametrize(
    ("fields", "field"),
    [
        ({"tools": [{"type": "function"}]}, "tools"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format"),
        ({"logprobs": True}, "logprobs"),
        ({"top_logprobs": 3}, "top_logprobs"),
        ({"tools": [], "tool_choice": "none", "response_format": {"type": "text"}, "logprobs": False}, None),
    ],
)
def test_fields_the_server_cannot_honour_are_named(fields, field):
    assert request(**fields).unsupported_field() == field


def test_answer_options_and_usage_chunks():
    assert request().answer_options(64) == {"max_tokens": 64}
    options = request(max_tokens=10, max_completion_tokens=20, temperature=0.0, stop="\n").answer_options(64)
    assert options == {"max_tokens": 20, "temperature": 0.0, "stop": ["\n"]}
    assert request(stream=True, stream_options={"include_usage": True}).include_usage
    assert not request(stream=True).include_usage


def test_feedback_requests():
    assert FeedbackRequest.model_validate({"decision_id": "dec-1", "correct": False}).correct is False
    for bad in (
        {"decision_id": "", "correct": True},
        {"decision_id": "d", "correct": True, "extra": 1},
        {"decision_id": "d"},
    ):
        with pytest.raises(ValidationError):
            FeedbackRequest.model_validate(bad)


def test_completions_and_chunks_parse_as_the_openai_sdk_reads_them():
    usage = TokenUsage(prompt_tokens=12, completion_tokens=3)
    body = completion("chatcmpl-1", "smollm2", "Shakespeare", "stop", {"route": "direct"}, usage)
    parsed = ChatCompletion.model_validate(body)
    assert parsed.choices[0].message.content == "Shakespeare"
    assert parsed.usage.total_tokens == 15 and body[EXTENSION_FIELD] == {"route": "direct"}
    assert completion("c", "m", "x", "length")["usage"] is None
    first = ChatCompletionChunk.model_validate(chunk("c", "m", {"role": "assistant", "content": "Sh"}))
    assert first.choices[0].delta.content == "Sh"
    last = chunk("c", "m", {}, "stop", record={"route": "retrieve"})
    assert ChatCompletionChunk.model_validate(last).choices[0].finish_reason == "stop"
    tail = chunk("c", "m", None, usage=usage)
    assert tail["choices"] == [] and tail["usage"] == usage_field(usage) == {
        "prompt_tokens": 12,
        "completion_tokens": 3,
        "total_tokens": 15,
    }


def test_events():
    assert event("[DONE]") == b"data: [DONE]\n\n"
    assert event({"q": "é"}) == 'data: {"q": "é"}\n\n'.encode()
    with pytest.raises(ValueError):
        event({"score": float("nan")})
