"""What a causal LM returns for one continuation, and where its text stops."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Generation:
    """One generated continuation.

    ``token_ids`` are the generated tokens, including the one that ended generation (EOS,
    or the token completing a stop string). ``token_logprobs`` are their log-probabilities
    under the model's own next-token distribution (raw logits, temperature 1, no top-k /
    top-p), for greedy and sampled tokens alike. ``finish_reason`` is ``"stop"``,
    ``"eos"`` or ``"length"``.
    """

    text: str
    token_ids: list[int]
    token_logprobs: list[float]
    finish_reason: str
    prompt_tokens: int
    #: Per generated token, the most likely alternatives as ``(token_id, logprob)``, best
    #: first; empty unless ``generate(top_logprobs=n)`` asked for them.
    top_logprobs: list[list[tuple[int, float]]] = field(default_factory=list)


def first_stop(text: str, stops: list[str]) -> int | None:
    """Index in ``text`` where the earliest stop string starts, or ``None``."""
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    return min(hits) if hits else None


def settled_length(text: str, stops: list[str]) -> int:
    """How much of a still growing ``text`` the next tokens cannot change: the text before
    its first stop string, short of an ending that may yet become one, and of a last
    character whose bytes have not all arrived (it decodes as U+FFFD until they do)."""
    end = first_stop(text, stops)
    end = len(text) if end is None else end
    longest = max(map(len, stops), default=0)
    # The longest ending that begins a stop string: its earliest possible start.
    for start in range(max(0, len(text) - longest + 1), len(text)):
        if any(s.startswith(text[start:]) for s in stops):
            end = min(end, start)
            break
    return len(text[:end].rstrip("\ufffd"))
