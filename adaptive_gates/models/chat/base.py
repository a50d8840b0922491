"""The chat protocol that prompt-based gates talk to, and the records it exchanges.

A gate that asks an LLM something (verbalized confidence, SKR prompt/icl) needs
``chat(messages, **options) -> ChatReply`` and its awaitable twin ``achat``; their
keywords are ``ChatOptions``, defaulted and checked for every backend by
``ResolvedChatOptions``. The embedded SmolLM2 implements them in ``local_chat``
(``achat`` in a worker thread); any OpenAI-compatible server implements them in
``openai_chat`` (``achat`` natively); LangChain chat models and LlamaIndex LLMs are
adapted to them by the integration packages. An object with
only ``chat`` (a ``SyncChatModel``) still serves: ``with_achat`` lends it an ``achat``.
Many conversations are asked at once by ``chat_batch``.
"""

from __future__ import annotations

import asyncio
import functools
import math
from collections.abc import Collection, Mapping, Sequence
from dataclasses import InitVar, dataclass, field
from typing import Any, Protocol, TypedDict, Unpack, cast, runtime_checkable

from ...records.token_logprobs import TokenLogprob
from ...records.validation import check_encodable, check_stops

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


class ChatOptions(TypedDict, total=False):
    """The keywords of every chat call (``chat``, ``achat``, ``stream``, ``astream``, a
    backend's ``chat_batch``), each optional: ``model.chat(messages, max_tokens=8,
    stop=["\\n"])``. A chat model may declare them as keyword parameters or take
    ``**options: Unpack[ChatOptions]`` and read them through ``ResolvedChatOptions``.

    Keys:
        max_tokens: the most tokens the reply may have (default 64).
        temperature: ``0`` (the default) decodes greedily; above it the backend samples.
        top_logprobs: above ``0``, asks for each token's log-probability with that many
            alternatives per position; a backend that cannot give them replies with
            ``tokens=None``. ``0`` (the default) asks for none.
        stop: strings the reply ends before (``None``, the default: none; one string
            is that one).
    """

    max_tokens: int
    temperature: float
    top_logprobs: int
    stop: Sequence[str] | None


#: The keywords of a framework's call that ``options_from_openai`` reads, by OpenAI's names.
OPENAI_CALL_OPTIONS = ("max_tokens", "temperature", "logprobs", "top_logprobs")


def options_from_openai(
    model: object,
    call: Mapping[str, Any],
    *,
    stop: Sequence[str] | None = None,
    also_taken: Collection[str] = (),
) -> tuple[ChatOptions, int]:
    """A core chat call's options from the keywords of a framework's call in OpenAI's
    names (``call``: ``OPENAI_CALL_OPTIONS``) over ``model``'s own settings (its
    attributes of those names), and how many alternatives per token to return: what a
    framework's chat model built on a core one (LangChain's, LlamaIndex's) asks it.
    ``stop``: the call's stop strings, when the framework has them (none: ``None``).

    Raises:
        TypeError: ``call`` holds a keyword ``model`` does not take (``also_taken`` are
            the framework's own, read elsewhere).
    """
    unknown = set(call) - {*OPENAI_CALL_OPTIONS, *also_taken}
    if unknown:
        raise TypeError(f"unsupported call options for {type(model).__name__}: {sorted(unknown)}")
    asked = {name: call.get(name, getattr(model, name)) for name in OPENAI_CALL_OPTIONS}
    top = int(asked["top_logprobs"])
    options = ChatOptions(
        max_tokens=asked["max_tokens"],
        temperature=asked["temperature"],
        # The core returns tokens only when alternatives are asked for; one is the least.
        top_logprobs=max(top, 1) if asked["logprobs"] else 0,
    )
    if stop is not None:
        options["stop"] = list(stop) or None
    return options, top


@dataclass(frozen=True)
class ResolvedChatOptions:
    """``ChatOptions`` as a backend reads them: each one given or defaulted, and checked
    here once for every backend, so a bad value raises ``ValueError`` naming it before
    anything is asked (an unknown keyword raises ``TypeError``, as it would from a
    signature that declares the four). Built as ``ResolvedChatOptions(**options)``."""

    max_tokens: int = 64
    temperature: float = 0.0
    top_logprobs: int = 0
    stop: InitVar[Sequence[str] | None] = None
    #: The stop strings, checked (empty: none).
    stops: tuple[str, ...] = field(init=False)

    def __post_init__(self, stop: Sequence[str] | None) -> None:
        for name, least in (("max_tokens", 1), ("top_logprobs", 0)):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        t = self.temperature
        if isinstance(t, bool) or not isinstance(t, (int, float)) or not 0 <= t < math.inf:
            raise ValueError(f"temperature must be >= 0 and finite, got {self.temperature!r}")
        object.__setattr__(self, "stops", tuple(check_stops(stop)))


@runtime_checkable
class SyncChatModel(Protocol):
    """Anything that answers a conversation with one assistant reply, taking the
    ``ChatOptions`` keywords.

    Failures raise ``BackendError``; a backend that gives no answer at all (timeout,
    unreachable) raises ``BackendUnavailableError``.
    """

    @property
    def model_id(self) -> str: ...

    def chat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply: ...


@runtime_checkable
class ChatModel(SyncChatModel, Protocol):
    """A ``SyncChatModel`` that can also be awaited: ``achat`` takes ``chat``'s arguments,
    gives the same reply and raises the same errors, without blocking the event loop."""

    async def achat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply: ...


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

    def chat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
        """The wrapped model's reply."""
        return self.model.chat(messages, **options)

    async def achat(self, messages: Sequence[Message], **options: Unpack[ChatOptions]) -> ChatReply:
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
