"""OpenAI's chat-completions shapes as the server reads and writes them.

The request model takes what OpenAI clients send (the ``openai`` SDK, LangChain's
``ChatOpenAI``, LlamaIndex's OpenAI-like LLM) and ignores the sampling options the
server does not pass on; what it cannot serve (``n`` > 1, a message without text, tools,
a response format, log-probabilities, text that is no UTF-8) is refused with OpenAI's
error shape, naming the field, rather than answered as if it had been honoured.
"""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..models.chat.base import ChatOptions, Message, TokenUsage
from ..records.validation import check_encodable

#: The response header that carries the decision's summary.
DECISION_HEADER = "X-Adaptive-Gates-Decision"
#: The extension field of a completion (and of a stream's last chunk) with the decision record.
EXTENSION_FIELD = "adaptive_gates"


class ContentPart(BaseModel):
    """A part of a message's content; only text parts are served."""

    model_config = ConfigDict(extra="allow")

    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    """One message of the conversation."""

    model_config = ConfigDict(extra="allow")

    role: Literal["system", "developer", "user", "assistant"]
    content: str | list[ContentPart] | None = None

    def text(self) -> str:
        """The message's text (text parts joined); ``ValueError`` for other parts."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        kinds = sorted({part.type for part in self.content if part.type != "text"})
        if kinds:
            raise ValueError(f"only text content is served, got parts of type {', '.join(kinds)}")
        return "".join(part.text or "" for part in self.content)


class StreamOptions(BaseModel):
    """``stream_options``: ``include_usage`` asks for a last chunk with the usage."""

    model_config = ConfigDict(extra="allow")

    include_usage: bool = False


def _absent_or(*served: object) -> Any:
    return lambda value: value is None or value in served


#: Fields a client sets expecting them honoured, which the server cannot honour: each
#: with the values that ask nothing of it (absent, empty, "none"), which pass.
UNSUPPORTED_FIELDS: dict[str, Any] = {
    "tools": lambda value: not value,
    "functions": lambda value: not value,
    "tool_choice": _absent_or("none", "auto"),
    "function_call": _absent_or("none", "auto"),
    "response_format": lambda value: value is None or (isinstance(value, dict) and value.get("type") == "text"),
    "logprobs": lambda value: not value,
    "top_logprobs": lambda value: not value,
}


class ChatCompletionRequest(BaseModel):
    """A ``POST /v1/chat/completions`` body."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    messages: list[ChatMessage] = Field(min_length=1)
    stream: bool = False
    max_tokens: int | None = Field(default=None, ge=1)
    max_completion_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    stop: str | list[str] | None = None
    n: int = 1
    stream_options: StreamOptions | None = None

    @field_validator("n")
    @classmethod
    def _one_choice(cls, n: int) -> int:
        if n != 1:
            raise ValueError("only n=1 is served")
        return n

    @field_validator("stop")
    @classmethod
    def _stops(cls, stop: str | list[str] | None) -> str | list[str] | None:
        stops = [stop] if isinstance(stop, str) else stop or []
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        return stop

    def unsupported_field(self) -> str | None:
        """The first field set to what the server cannot honour (``UNSUPPORTED_FIELDS``)."""
        extra = self.model_extra or {}
        return next((name for name, passes in UNSUPPORTED_FIELDS.items() if not passes(extra.get(name))), None)

    @property
    def include_usage(self) -> bool:
        """Whether a stream should end with a chunk holding the usage."""
        return self.stream_options is not None and self.stream_options.include_usage

    def chat_messages(self) -> list[Message]:
        """The messages as ``{"role", "content"}`` dicts (``developer`` read as ``system``).

        Raises:
            ValueError: a message holds other parts than text, or text that cannot be
                encoded as UTF-8 (a lone surrogate).
        """
        messages: list[Message] = []
        for i, message in enumerate(self.messages):
            text = message.text()
            check_encodable(text, f"message {i}")
            messages.append({"role": "system" if message.role == "developer" else message.role, "content": text})
        return messages

    def answer_options(self, default_max_tokens: int) -> ChatOptions:
        """The ``ChatModel.chat`` options the request sets."""
        options = ChatOptions(max_tokens=self.max_completion_tokens or self.max_tokens or default_max_tokens)
        if self.temperature is not None:
            options["temperature"] = self.temperature
        if self.stop is not None:
            options["stop"] = [self.stop] if isinstance(self.stop, str) else list(self.stop)
        return options


class FeedbackRequest(BaseModel):
    """A ``POST /v1/feedback`` body: was the answer of decision ``decision_id`` correct."""

    model_config = ConfigDict(extra="forbid")

    decision_id: str = Field(min_length=1)
    correct: bool


def decision_header(summary: dict[str, Any]) -> str:
    """A decision's summary as compact ASCII JSON, fit for ``DECISION_HEADER``."""
    return json.dumps(summary, separators=(",", ":"), ensure_ascii=True)


def usage_field(usage: TokenUsage) -> dict[str, int]:
    """OpenAI's ``usage`` object."""
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
    }


def completion(
    completion_id: str,
    model: str,
    text: str,
    finish_reason: str,
    record: dict[str, Any] | None = None,
    usage: TokenUsage | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object, with the decision record when there is one, and the
    usage when it is known (else ``null``, as servers that count nothing send)."""
    out: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish_reason,
            }
        ],
        "usage": None if usage is None else usage_field(usage),
    }
    if record is not None:
        out[EXTENSION_FIELD] = record
    return out


def chunk(
    completion_id: str,
    model: str,
    delta: dict[str, str] | None,
    finish_reason: str | None = None,
    record: dict[str, Any] | None = None,
    usage: TokenUsage | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` object; the last one with a choice carries the decision
    record. ``delta=None`` makes the usage chunk that ends a stream asked for it: no
    choice, and the ``usage``."""
    choices = [] if delta is None else [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}]
    out: dict[str, Any] = {
        "id": completion_id,
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }
    if usage is not None:
        out["usage"] = usage_field(usage)
    if record is not None:
        out[EXTENSION_FIELD] = record
    return out


def event(payload: dict[str, Any] | str) -> bytes:
    """One server-sent event: ``data: <JSON>`` (or the literal ``[DONE]``) and a blank line."""
    data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False, allow_nan=False)
    return f"data: {data}\n\n".encode()
