"""Answering a question with an LLM, with or without retrieved passages.

The prompts follow SKR §1.3: the same prompt either way, with
``Here are some passages:`` and the top passages placed before the question
when the gate chose to retrieve.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from .models.local_lm import LocalCausalLM

DEFAULT_INSTRUCTION = "Answer the following question with one or few words."


@runtime_checkable
class Answerer(Protocol):
    """Produces short answers, optionally grounded in passages."""

    def answer_batch(
        self, questions: Sequence[str], passages: Sequence[Sequence[str]] | None = None
    ) -> list[str]:
        """One answer per question; ``passages[i]`` are question i's passages."""
        ...


def build_prompt(
    question: str,
    passages: Sequence[str] | None = None,
    instruction: str = DEFAULT_INSTRUCTION,
    max_passage_chars: int = 600,
) -> str:
    """The user message for one question (SKR §1.3 layout)."""
    parts = [instruction]
    if passages:
        parts.append("Here are some passages:")
        parts.extend(f"[{i}] {p[:max_passage_chars]}" for i, p in enumerate(passages, start=1))
    parts.append(f"Question: {question}")
    return "\n".join(parts)


def clean_answer(text: str) -> str:
    """The first non-empty line of a reply, without an ``Answer:`` prefix."""
    for line in text.strip().splitlines():
        line = line.strip()
        if line:
            return line.removeprefix("Answer:").strip()
    return ""


class LLMAnswerer:
    """Answers with a local causal LM (the embedded SmolLM2 by default).

    Args:
        lm: the model; ``None`` = the process-wide embedded default.
        instruction: the first line of every prompt.
        max_new_tokens: answers are short; this bounds a rambling model.
        max_passage_chars: each passage is cut to this length.
        batch_size: questions generated together.
    """

    def __init__(
        self,
        lm: "LocalCausalLM | None" = None,
        *,
        instruction: str = DEFAULT_INSTRUCTION,
        max_new_tokens: int = 24,
        max_passage_chars: int = 600,
        batch_size: int = 8,
    ) -> None:
        self._lm = lm
        self.instruction = instruction
        self.max_new_tokens = max_new_tokens
        self.max_passage_chars = max_passage_chars
        self.batch_size = batch_size

    @property
    def lm(self) -> "LocalCausalLM":
        if self._lm is None:
            from .models.defaults import default_llm

            self._lm = default_llm()
        return self._lm

    def answer(self, question: str, passages: Sequence[str] | None = None) -> str:
        """Answer one question."""
        return self.answer_batch([question], [passages] if passages is not None else None)[0]

    def answer_batch(
        self, questions: Sequence[str], passages: Sequence[Sequence[str]] | None = None
    ) -> list[str]:
        """Answer a batch; with ``passages`` each question gets its own passages."""
        if passages is not None and len(passages) != len(questions):
            raise ValueError(f"got {len(passages)} passage lists for {len(questions)} questions")
        prompts = [
            build_prompt(q, passages[i] if passages is not None else None, self.instruction, self.max_passage_chars)
            for i, q in enumerate(questions)
        ]
        answers: list[str] = []
        for start in range(0, len(prompts), self.batch_size):
            batch = prompts[start : start + self.batch_size]
            answers.extend(
                clean_answer(g.text) for g in self.lm.generate(batch, max_new_tokens=self.max_new_tokens, stop=["\n"])
            )
        return answers
