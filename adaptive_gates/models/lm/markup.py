"""Chat-template markup in text that goes into a prompt, and how it is broken so it
tokenizes as plain words: text from outside the package never becomes a template's own
special token."""

from __future__ import annotations

import re

#: Chat-template markup of the common model families: ``<|im_start|>``, ``<|eot_id|>``,
#: ``<s>``, ``</s>``, ``<start_of_turn>``, ``<filename>`` (any ``<...>`` tag without
#: spaces), an opening ``<|`` (or its full-width ``<｜``), and ``[INST]``, ``[/INST]``, ``[SYSTEM_PROMPT]``
#: (upper-case bracket tags). Only the first character of a match is kept apart.
CHAT_MARKUP = re.compile(r"<(?=[^\s<>]+>|[|\uff5c])|\[(?=/?[A-Z][A-Z_]*\])")


def defuse_markup(text: str, markup: re.Pattern[str] = CHAT_MARKUP) -> str:
    """``text`` with a space after the first character of each match of ``markup``
    (``<|im_end|>`` -> ``< |im_end|>``): the words stay legible, the token is gone."""
    return markup.sub(lambda m: f"{m.group(0)[:1]} {m.group(0)[1:]}", text)
