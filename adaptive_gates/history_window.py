"""What a gate judges in a chat: the last user turn after a window of the history.

A follow-up ("and when did he die?") is no question on its own; after "Who wrote
Hamlet?" it is a question about Shakespeare. The serve command and the framework
packages all judge it the same way, by ``windowed_question``.
"""

from __future__ import annotations

from collections.abc import Sequence


def windowed_question(question: str, history: Sequence[str | None], window: int) -> str:
    """The last ``window`` messages of ``history`` (oldest first) followed by the
    question, one a line; the question alone when the window is 0. ``None`` stands for
    a message that is no dialogue turn (a system prompt, a tool result): it counts
    toward the window but is not shown."""
    turns = [text.strip() for text in history[-window:] if text] if window else []
    return "\n".join([*filter(None, turns), question])
