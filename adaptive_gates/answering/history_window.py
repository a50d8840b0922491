"""What a gate judges in a chat: the latest user question, made standalone by one rule.

A follow-up ("and when did he die?") is no question on its own; after "Who wrote
Hamlet?" it is a question about Shakespeare. A question that stands alone ("What is the
capital of France?") is judged alone, whatever came before it.

The rule (``standalone_question``): a question that refers back (``refers_back``: it
holds a word that points at an earlier turn, such as he, it, they, this, that or there;
it opens as a continuation, "and ...", "what about ..."; or it is two words or fewer,
"Why?") is judged after the user's previous question, itself made standalone the same
way, reaching at most ``window`` questions back; any other question is judged alone.
Only the user's questions are joined: an assistant's reply, a system prompt or a tool's
output never is, so the judged text (and what feedback stores in a gate's memory) is a
question, never a transcript. ``adaptive-gates serve`` and the framework packages'
history windows all judge by this rule; an LLM that condenses the conversation (the
frameworks' condense step) is the alternative where the rule is too plain.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

#: Words that point at something an earlier turn named.
REFERRING_WORDS = frozenset(
    {
        *("he", "him", "his", "she", "her", "hers", "it", "its", "they", "them", "their", "theirs"),
        *("this", "that", "these", "those", "there", "then"),
    }
)
#: Openings that continue an earlier question.
CONTINUATIONS = ("and", "but", "also", "so", "what about", "how about")
#: A question of this many words or fewer leans on what came before ("Why?", "And where?").
SHORTEST_STANDALONE = 3

_WORD = re.compile(r"[a-z]+")


def refers_back(question: str) -> bool:
    """Whether ``question`` leans on an earlier turn (see the module's rule)."""
    words = _WORD.findall(question.lower())
    if not words:
        return False
    if len(words) < SHORTEST_STANDALONE:
        return True
    opening = " ".join(words[:2])
    if any(opening == c or opening.startswith(c + " ") for c in CONTINUATIONS):
        return True
    return not REFERRING_WORDS.isdisjoint(words)


def standalone_question(question: str, earlier_questions: Sequence[str], window: int) -> str:
    """``question`` as a gate judges it: alone, or after as many of the user's
    ``earlier_questions`` (oldest first) as it leans on, at most ``window`` of them, one
    a sentence apart (see the module's rule)."""
    judged = [question.strip()]
    reachable = [q.strip() for q in earlier_questions[-window:] if q.strip()] if window > 0 else []
    while reachable and refers_back(judged[0]):
        judged.insert(0, reachable.pop())
    return " ".join(judged)
