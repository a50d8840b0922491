"""LlamaIndex chat messages <-> the core's ``{"role", "content"}`` turns."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from llama_index.core.base.llms.types import ChatMessage, MessageRole

#: The roles the core's chat protocol knows.
_CORE_ROLES = {MessageRole.SYSTEM: "system", MessageRole.USER: "user", MessageRole.ASSISTANT: "assistant"}


def to_core_messages(messages: Sequence[ChatMessage]) -> list[dict[str, str]]:
    """The core's turns for a LlamaIndex conversation; a role the core has no word for
    (tool, function, ...) is refused by name rather than silently recast."""
    turns = []
    for message in messages:
        role = _CORE_ROLES.get(MessageRole(message.role))
        if role is None:
            raise ValueError(f"the core's chat models take system, user and assistant turns, not {message.role!r}")
        turns.append({"role": role, "content": message.content or ""})
    return turns


def from_core_messages(messages: Sequence[Mapping[str, str]]) -> list[ChatMessage]:
    """LlamaIndex messages for the core's turns."""
    return [ChatMessage(role=MessageRole(m["role"]), content=m["content"]) for m in messages]
