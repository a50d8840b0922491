"""SeaKR's code-form reasoning prompt (SPEC §4.4) and its few-shot demonstrations.

The prompt is a plain completion text, not a chat message::

    Question: "{q}"\\nAnswer: {steps} So the answer is {a}.   (demos, joined by blank lines)

    Context: [1] doc\\n[2] doc\\n                             (optional)
    Answer in the same format as before. \\nQuestion: "{q}"\\nAnswer: {steps so far}

Every question, the demos' included, is quoted on its line (``prompts.quote_question``;
the code form has it bare), so a question cannot write the steps or the answer itself.

The demos below are short HotpotQA-style bridge and comparison questions written for
this package; they only teach the step-by-step format.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..answering.prompts import quote_question

__all__ = [
    "ANSWER_STOPS",
    "DEFAULT_DEMOS",
    "STEP_STOPS",
    "Demo",
    "build_prompt",
    "clip_passage",
    "join_steps",
    "normalize_step",
    "prompt_template",
    "snippet_template",
]


@dataclass(frozen=True)
class Demo:
    """One worked example: reasoning steps, then the answer."""

    question: str
    steps: str
    answer: str

    def render(self) -> str:
        """The demo as it appears in the prompt."""
        return f"Question: {quote_question(self.question)}\nAnswer: {self.steps} So the answer is {self.answer}."


DEFAULT_DEMOS: tuple[Demo, ...] = (
    Demo(
        "Who was born first, Albert Einstein or Niels Bohr?",
        "Albert Einstein was born on 14 March 1879. Niels Bohr was born on 7 October 1885. 1879 is earlier than 1885.",
        "Albert Einstein",
    ),
    Demo(
        "What is the capital of the country whose national bird is the kiwi?",
        "The kiwi is the national bird of New Zealand. The capital of New Zealand is Wellington.",
        "Wellington",
    ),
    Demo(
        "Are the Nile and the Amazon both rivers in Africa?",
        "The Nile is a river in Africa. The Amazon is a river in South America.",
        "no",
    ),
    Demo(
        "Who directed the film in which Leonardo DiCaprio played Jack Dawson?",
        "Leonardo DiCaprio played Jack Dawson in Titanic. Titanic was directed by James Cameron.",
        "James Cameron",
    ),
    Demo(
        "Which band was formed earlier, The Beatles or Queen?",
        "The Beatles were formed in 1960. Queen was formed in 1970.",
        "The Beatles",
    ),
    Demo(
        "In which country was the composer of The Four Seasons born?",
        "The Four Seasons was composed by Antonio Vivaldi. Antonio Vivaldi was born in Venice, Italy.",
        "Italy",
    ),
    Demo(
        "Are Mount Everest and K2 in the same mountain range?",
        "Mount Everest is in the Himalayas. K2 is in the Karakoram.",
        "no",
    ),
    Demo(
        "In what year was the university where Barack Obama studied law founded?",
        "Barack Obama studied law at Harvard University. Harvard University was founded in 1636.",
        "1636",
    ),
    Demo(
        "The author of the Harry Potter books was born in which country?",
        "The Harry Potter books were written by J. K. Rowling. J. K. Rowling was born in England.",
        "England",
    ),
    Demo(
        "What sport is played by the team whose home ground is Old Trafford?",
        "Old Trafford is the home ground of Manchester United. Manchester United is a football club.",
        "football",
    ),
)

#: A reasoning step ends at its first period or line break. Not ``". "``: transformers
#: matches a stop string that straddles the prompt's last token and the first generated
#: one, so after a prompt ending in "." the first token " X" would already stop it. An
#: initial ("J. K. Rowling") therefore ends a step early; the next step continues it.
STEP_STOPS: tuple[str, ...] = (".", "\n")
#: A full chain of thought ends at the end of its line.
ANSWER_STOPS: tuple[str, ...] = ("\n",)

_INSTRUCTION = "Answer in the same format as before. \n"


def join_steps(steps: Sequence[str]) -> str:
    """The reasoning so far as it follows ``Answer:`` (each step led by one space)."""
    return "".join(f" {s}" for s in steps if s)


def normalize_step(text: str) -> str:
    """A generated step stripped and closed by a period (stop strings cut the period off)."""
    text = " ".join(text.split())
    if text and text[-1] not in ".!?":
        text += "."
    return text


def clip_passage(text: str, max_chars: int | None = None) -> str:
    """A passage on one line (whitespace collapsed), cut to ``max_chars`` characters."""
    return " ".join(" ".join(text.split())[:max_chars].split())


def build_prompt(
    question: str,
    steps: Sequence[str] = (),
    documents: Sequence[str] = (),
    *,
    demos: Sequence[Demo] = DEFAULT_DEMOS,
    max_doc_chars: int | None = None,
) -> str:
    """The completion prompt for the next step of ``question`` after ``steps``.

    ``documents`` go in a ``Context:`` block, each through ``clip_passage``. The text
    ends with ``Answer:`` plus the steps, never with a space, so the model's next token
    carries its own leading space.
    """
    return _layout(quote_question(question), steps, documents, demos, max_doc_chars)


def prompt_template(demos: Sequence[Demo] = DEFAULT_DEMOS) -> str:
    """``build_prompt`` of a first step as a ``prompts.fill`` template: its ``{question}``
    slot is quoted when filled, so ``fill(prompt_template(d), question=q) == build_prompt(q, demos=d)``."""
    return _layout("{question}", (), (), demos, None)


def _layout(
    quoted_question: str,
    steps: Sequence[str],
    documents: Sequence[str],
    demos: Sequence[Demo],
    max_doc_chars: int | None,
) -> str:
    context = "".join(f"[{i}] {clip_passage(d, max_doc_chars)}\n" for i, d in enumerate(documents, start=1))
    return (
        _demo_block(demos)
        + (f"Context: {context}" if documents else "")
        + f"{_INSTRUCTION}Question: {quoted_question}\nAnswer:{join_steps(steps)}"
    )


def snippet_template(demos: Sequence[Demo] = DEFAULT_DEMOS, instruction: str = _INSTRUCTION) -> str:
    """``build_prompt`` with one document as a ``prompts.fill`` template: slots
    ``{snippet}``, ``{question}`` and ``{reasoning}`` (the steps, led by a space), the
    form ``UncertaintyReranker`` takes. ``instruction`` (ending with its line break)
    stands between the document and the question."""
    return _demo_block(demos) + f"Context: [1] {{snippet}}\n{instruction}Question: {{question}}\nAnswer:{{reasoning}}"


def _demo_block(demos: Sequence[Demo]) -> str:
    return "\n\n".join(d.render() for d in demos) + "\n\n" if demos else ""
