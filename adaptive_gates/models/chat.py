"""The chat protocol that prompt-based gates talk to, and the records it exchanges.

A gate that asks an LLM something (verbalized confidence, SKR prompt/icl) needs
``chat(messages) -> ChatReply`` and its awaitable twin ``achat``. The embedded SmolLM2
implements them in ``local_chat`` (``achat`` in a worker thread); any OpenAI-compatible
server implements them in ``openai_chat`` (``achat`` natively); LangChain chat models
and LlamaIndex LLMs are adapted to them by the integration packages. An object with
only ``chat`` (a ``SyncChatModel``) still serves: ``with_achat`` lends it an ``achat``.
Many conversations are asked at once by ``chat_batch``.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol, cast, runtime_checkable

from ..token_logprobs import TokenLogprob
from ..validation import check_encodable

#: One chat turn: ``{"role": "system" | "user" | "assistant", "content": text}``.
Message = Mapping[str, str]

_ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class TokenUsage:
    """Tokens a request cost: the prompt read and the completion generated (OpenAI's
    ``usage`` fields). Usages add up, so a run's cost is the sum of its replies'."""

    prompt_tokens: int
    completion_tokens: int

    def __post_init__(self) -> None:
        for name in ("prompt_tokens", "completion_tokens"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name} must be an int >= 0, got {value!r}")

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return TokenUsage(self.prompt_tokens + other.prompt_tokens, self.completion_tokens + other.completion_tokens)

    def to_json(self) -> dict[str, int]:
        """OpenAI's ``usage`` object (``total_tokens`` included)."""
        return {
            "prompt_tokens": self.prompt_tokens,
            "completion_tokens": self.completion_tokens,
            "total_tokens": self.total_tokens,
        }

    @classmethod
    def from_openai(cls, usage: object) -> TokenUsage | None:
        """The usage of an OpenAI-style ``usage`` object or mapping (``prompt_tokens``,
        ``completion_tokens``); ``None`` when it is absent or does not say both counts,
        as with servers that report no usage."""
        if usage is None:
            return None
        read = usage.get if isinstance(usage, Mapping) else functools.partial(getattr, usage)
        try:
            return cls(read("prompt_tokens", None), read("completion_tokens", None))
        except ValueError:
            return None


@dataclass(frozen=True)
class ChatReply:
    """An assistant reply. ``tokens`` is ``None`` when the backend gives no log-probs,
    ``usage`` when it does not say what the request cost."""

    text: str
    tokens: tuple[TokenLogprob, ...] | None = None
    finish_reason: str = "stop"
    usage: TokenUsage | None = None


@runtime_checkable
class SyncChatModel(Protocol):
    """Anything that answers a conversation with one assistant reply.

    ``temperature=0`` means greedy decoding. ``top_logprobs > 0`` asks for token
    log-probabilities with that many alternatives per position; backends that cannot
    give them return ``tokens=None``. Failures raise ``BackendError``; a backend that
    gives no answer at all (timeout, unreachable) raises ``BackendUnavailableError``.
    """

    @property
    def model_id(self) -> str: ...

    def chat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply: ...


@runtime_checkable
class ChatModel(SyncChatModel, Protocol):
    """A ``SyncChatModel`` that can also be awaited: ``achat`` takes ``chat``'s arguments,
    gives the same reply and raises the same errors, without blocking the event loop."""

    async def achat(
        self,
        messages: Sequence[Message],
        *,
        max_tokens: int = 64,
        temperature: float = 0.0,
        top_logprobs: int = 0,
        stop: Sequence[str] | None = None,
    ) -> ChatReply: ...


def with_achat(model: SyncChatModel) -> ChatModel:
    """``model`` itself when it has an ``achat``; otherwise a ``ThreadedAsyncChat`` that
    awaits its ``chat`` in a worker thread."""
    if callable(getattr(model, "achat", None)):
        return cast(ChatModel, model)  # it has both methods
    return ThreadedAsyncChat(model)


class ThreadedAsyncChat:
    """The chat protocol over an object that has only ``chat``: ``achat`` runs ``chat``
    in a worker thread, so awaiting it never blocks the event loop."""

    def __init__(self, model: SyncChatModel) -> None:
        self.model = model

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.model!r})"

    @property
    def model_id(self) -> str:
        return self.model.model_id

    def chat(self, messages: Sequence[Message], **options: Any) -> ChatReply:
        """The wrapped model's reply."""
        return self.model.chat(messages, **options)

    async def achat(self, messages: Sequence[Message], **options: Any) -> ChatReply:
        """The wrapped model's reply, asked from a worker thread."""
        return await asyncio.to_thread(self.model.chat, messages, **options)


def check_messages(messages: Sequence[Message]) -> list[dict[str, str]]:
    """Validated plain-dict copies of ``messages`` (roles known, contents strings)."""
    if isinstance(messages, (str, bytes)) or not messages:
        raise ValueError("messages must be a non-empty list of {'role', 'content'} dicts")
    clean = []
    for i, message in enumerate(messages):
        role, content = message.get("role"), message.get("content")
        if role not in _ROLES:
            raise ValueError(f"message {i}: role must be one of {_ROLES}, got {role!r}")
        if not isinstance(content, str):
            raise ValueError(f"message {i}: content must be a str, got {type(content).__name__}")
        check_encodable(content, f"message {i}: content")
        clean.append({"role": role, "content": content})
    return clean


def user(content: str) -> list[dict[str, str]]:
    """A one-message conversation."""
    return [{"role": "user", "content": content}]
