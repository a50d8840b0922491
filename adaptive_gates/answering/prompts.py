"""Prompt templates of the prompt-based gates, verbatim from the papers and their code,
and the one defence this package adds to them (docs/prompts.md).

``{question}`` is the question slot, ``{prediction}`` an earlier answer, ``{paras}`` the
retrieved passages. Chat models get each template as the user message; completion
models get ``COMPLETION_SUFFIX`` (or ``JUDGEMENT_COMPLETION_SUFFIX``) appended.

The templates are the papers'; what fills their slots is the package's one delimiting
scheme (docs/prompts.md): every text from outside the package -- a question, a
retrieved passage, a turn of a conversation -- goes in as one line between double
quotes it cannot close (``quote_question``), after a label the package writes
(``[1]`` for a passage, the role for a turn: ``quote_passages``, ``quote_turns``). So
no such text can start a forged ``Answer:``/``Question:``/role line, close its block, or
carry a chat template's role markers. ``fill`` does this for the question of every
template, the papers' or a user's.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

from ..models.lm.markup import defuse_markup

# When-to-Retrieve (Ni et al., 2024), SPEC §3 ------------------------------------------
_ANSWER = "Answer the following question based on your internal knowledge with one or few words."
_SAY = (
    ' If you are sure the answer is accurate and correct, please say "certain" after the answer.'
    ' If you are not confident with the answer, please say "uncertain".'
)
_PUNISH = ' You will be punished if the answer is not right but you say "certain".'
_QUESTION = "\nQuestion: {question}"

QA = _ANSWER + _QUESTION
RETRIEVAL_QA = (
    "Given the following information: \n{paras}\nAnswer the following question based on the given "
    "information or your internal knowledge with one or few words." + _QUESTION
)
_EXPLAIN = (
    "Answer the following question based on your internal knowledge with one or few words and "
    "explain why you give this answer."
)

#: The single-turn strategies: one prompt asks for the answer and its certainty.
STRATEGIES: dict[str, str] = {
    "vanilla": _ANSWER + _SAY + _QUESTION,
    "punish": _ANSWER + _SAY + _PUNISH + _QUESTION,
    "explain": _EXPLAIN + _SAY + _QUESTION,
    "punish+explain": _EXPLAIN + _SAY + _PUNISH + _QUESTION,
    "step-by-step": (
        "Answer the following question based on your internal knowledge and let's think step by step.\n"
        " 1.Answer the question with one or few words.\n"
        ' 2.If you are sure the answer is accurate and correct, please say "certain" after the answer.'
        ' If you are not confident with the answer, please say "uncertain".' + _QUESTION
    ),
    "generate": (
        "Generate a short document that helps answer the following question based on your internal "
        "knowledge and answer the question with one or few words." + _SAY + _QUESTION
    ),
    # Turn 1 of the two-turn strategy is the plain QA prompt; CHALLENGE is turn 2.
    "challenge": QA,
}
CHALLENGE = (
    "I do not think your answer is right. If you are still sure that your answer is accurate and "
    'correct, please say "certain". Otherwise, say "uncertain".'
)
JUDGEMENT = (
    'If you are sure the answer is accurate and correct, please say "certain". If you are not '
    'confident with the answer, please say "uncertain".\nQuestion: {question}\nAnswer: {prediction}'
)
COMPLETION_SUFFIX = "\nAnswer: "
JUDGEMENT_COMPLETION_SUFFIX = "\nJudgement is: "

# SKR (Wang et al., 2023), SPEC §1.2 ---------------------------------------------------
SKR_PROMPT = "{question} Q: Do you need additional information to answer this question? A:"
SKR_KNOWN_DEMO = "No, I don't need additional information to answer this question."
SKR_UNKNOWN_DEMO = "Yes, I need additional information to answer this question."
#: The paper's Table 2 alternatives, with the reply word that means "known".
SKR_ALTERNATIVES: dict[str, tuple[str, str]] = {
    "additional-information": (SKR_PROMPT, "no"),
    "extra-prompts": ("{question} Q: Would you like any extra prompts to help you? A:", "no"),
    "additional-clues": ("{question} Q: Would you like any additional clues? A:", "no"),
    "answer-from-knowledge": ("{question} Q: Can you answer this question based on what you know? A:", "yes"),
    "solve-now": ("{question} Q: Can you solve this question now? A:", "yes"),
}


#: The delimiter of a quoted question, and the quote marks inside it that become ``'``.
QUOTE = '"'
_QUOTE_MARKS = str.maketrans(dict.fromkeys('"\u201c\u201d\u201e\u201f\uff02', "'"))


def quote_question(text: str) -> str:
    """``text`` as one quoted line a prompt can hold without taking orders from its layout.

    The text is put on one line (``one_line``), so no forged turn such as
    ``Answer: ... certain`` or a role marker can start a line or a turn; double quotes
    (and curly ones) inside become ``'``, so the closing ``"`` is always the
    delimiter's. Deterministic, so prompts stay cacheable. What the quoted words *ask*
    for is still read by the model: see docs/prompts.md.
    """
    return QUOTE + one_line(text).translate(_QUOTE_MARKS) + QUOTE


def quote_passages(passages: Iterable[str], max_chars: int | None = None) -> str:
    """``passages`` as numbered lines, ``[1] "..."``, each cut to ``max_chars`` characters
    and quoted (``quote_question``): what fills ``{paras}`` and every passage block the
    package writes. A passage cannot close its line or forge an ``Answer:`` line."""
    return quote_lines((f"[{i}]", text[:max_chars]) for i, text in enumerate(passages, start=1))


def quote_turns(turns: Iterable[tuple[str, str]]) -> str:
    """A conversation's ``(role, text)`` turns as lines ``role: "text"``: the role (the
    framework's own name for it, ``user``, ``human``, ``ai``...) written by the package,
    the text quoted (``quote_question``), so a turn cannot forge another role's line."""
    return quote_lines((f"{one_line(role)}:", text) for role, text in turns)


def quote_lines(labelled: Iterable[tuple[str, str]]) -> str:
    """One line per ``(label, text)``: the label, a space, the text quoted."""
    return "\n".join(f"{label} {quote_question(text)}" for label, text in labelled)


def one_line(text: str) -> str:
    """``text`` with every whitespace run (line breaks included) made one space and its
    chat-template markup broken (``defuse_markup``): it cannot start a line of a prompt."""
    return defuse_markup(" ".join(text.split()))


#: How ``fill`` renders the slots that hold text from outside the package: the question
#: quoted; an earlier answer (which the question can steer) on one line, as it ends the
#: judgement prompt (quoting it too cost SmolLM2 its judgement verdicts: docs/prompts.md).
UNTRUSTED_SLOTS: dict[str, Callable[[str], str]] = {"question": quote_question, "prediction": one_line}


def fill(template: str, **slots: str) -> str:
    """``template`` with its ``{slot}``s replaced in one pass: braces inside a question
    or passage are left alone, and unnamed braces in the template stay as they are.

    The ``question`` slot is always filled with ``quote_question`` of the text and the
    ``prediction`` slot with ``one_line`` of it (``UNTRUSTED_SLOTS``): no template, the
    package's or a caller's, gets a question verbatim."""
    values = {name: UNTRUSTED_SLOTS.get(name, str)(value) for name, value in slots.items()}
    return _SLOT.sub(lambda m: values.get(m.group(1), m.group(0)), template)


def check_template(template: object, slot: str) -> str:
    """``template`` if it is a string with a ``{slot}`` for ``fill``."""
    if not isinstance(template, str):
        raise ValueError(f"prompt template must be a str, got {type(template).__name__}")
    if "{" + slot + "}" not in template:
        raise ValueError(f"prompt template must contain {{{slot}}}, got {template!r}")
    return template


_SLOT = re.compile(r"\{(\w+)\}")
