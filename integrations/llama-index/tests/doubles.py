"""A scripted core chat model: the one double the tests use, to drive a gate's
deterministic branches (a confident draft, an uncertain reply) and a failing LLM."""

from __future__ import annotations

from collections.abc import Sequence

from adaptive_gates.models import ChatReply
from adaptive_gates.models.chat.base import Message


class ScriptedChat:
    """A core chat model with one fixed reply (or exception) for every request; it
    keeps the conversations it was sent."""

    model_id = "scripted-chat"

    def __init__(self, reply: ChatReply | Exception) -> None:
        self.reply = reply
        self.calls: list[list[dict[str, str]]] = []

    def chat(self, messages: Sequence[Message], **options) -> ChatReply:
        self.calls.append([dict(m) for m in messages])
        if isinstance(self.reply, Exception):
            raise self.reply
        return self.reply
