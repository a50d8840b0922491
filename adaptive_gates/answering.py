"""Answering a question with an LLM, with or without retrieved passages.

The prompts follow SKR §1.3: the same prompt either way, with
``Here are some passages:`` and the top passages placed before the question
when the gate chose to retrieve.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from .metrics import first_line

if TYPE_CHECKING:
    from .models.chat import ChatModel
    from .models.local_lm import LocalCausalLM

DEFAULT_INSTRUCTION = "Answer the following question with one or few words."
#: Where a short answer ends: the answerer's stop strings, and those of the SeaKR
#: samples measured against its answers.
ANSWER_STOP: tuple[str, ...] = ("\n",)


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
    return first_line(text, lambda line: line.strip().removeprefix("Answer:").strip())


class LLMAnswerer:
    """Answers with a chat model (the embedded SmolLM2 by default), greedily.

    Args:
        model: a ``ChatModel`` (e.g. an OpenAI-compatible server) or a
            ``LocalCausalLM``; ``None`` = the process-wide embedded default.
        style: ``"skr"`` (SKR §1.3: ``instruction``, then ``Here are some passages:``)
            or ``"when-to-retrieve"`` (SPEC §3's plain and retrieval-augmented QA
            prompts; ``instruction`` is not used).
        instruction: the first line of every SKR-style prompt.
        max_new_tokens: answers are short; this bounds a rambling model.
        max_passage_chars: each passage is cut to this length.
        batch_size: questions generated together by a local model.

    Raises:
        TypeError: ``model`` is neither a ``LocalCausalLM`` nor a chat model.
    """

    def __init__(
        self,
        model: "ChatModel | LocalCausalLM | None" = None,
        *,
        style: str = "skr",
        instruction: str = DEFAULT_INSTRUCTION,
        max_new_tokens: int = 24,
        max_passage_chars: int = 600,
        batch_size: int = 8,
    ) -> None:
        if style not in ("skr", "when-to-retrieve"):
            raise ValueError(f"style must be 'skr' or 'when-to-retrieve', got {style!r}")
        self._chat = _as_chat_model(model, batch_size)
        self.style = style
        self.instruction = instruction
        self.max_new_tokens = max_new_tokens
        self.max_passage_chars = max_passage_chars

    @property
    def chat(self) -> "ChatModel":
        """The chat model answering (a local LM arrives wrapped in a ``LocalChatModel``)."""
        return self._chat

    def prompt(self, question: str, passages: Sequence[str] | None = None) -> str:
        """The user message for one question."""
        if self.style == "skr":
            return build_prompt(question, passages, self.instruction, self.max_passage_chars)
        from .prompts import QA, RETRIEVAL_QA, fill

        if not passages:
            return fill(QA, question=question)
        paras = "\n".join(p[: self.max_passage_chars] for p in passages)
        return fill(RETRIEVAL_QA, question=question, paras=paras)

    def answer(self, question: str, passages: Sequence[str] | None = None) -> str:
        """Answer one question."""
        return self.answer_batch([question], [passages] if passages is not None else None)[0]

    def answer_batch(
        self, questions: Sequence[str], passages: Sequence[Sequence[str]] | None = None
    ) -> list[str]:
        """Answer a batch; with ``passages`` each question gets its own passages."""
        from .models.chat import chat_many, user

        if passages is not None and len(passages) != len(questions):
            raise ValueError(f"got {len(passages)} passage lists for {len(questions)} questions")
        conversations = [
            user(self.prompt(q, passages[i] if passages is not None else None)) for i, q in enumerate(questions)
        ]
        replies = chat_many(self.chat, conversations, max_tokens=self.max_new_tokens, stop=list(ANSWER_STOP))
        return [clean_answer(r.text) for r in replies]


def _as_chat_model(model: "ChatModel | LocalCausalLM | None", batch_size: int) -> "ChatModel":
    """``model`` as a chat model: a local LM (or ``None``, the embedded one) is wrapped.

    A local LM is recognised by its type rather than by the ``ChatModel`` protocol: a
    runtime protocol check only sees that attributes exist, not what they hold.
    """
    from .models.chat import LocalChatModel
    from .models.local_lm import LocalCausalLM

    if model is None or isinstance(model, LocalCausalLM):
        return LocalChatModel(model, batch_size=batch_size)
    if callable(getattr(model, "chat", None)) and hasattr(model, "model_id"):
        return model
    raise TypeError(
        f"model must be a ChatModel (with a chat() method and a model_id) or a LocalCausalLM, "
        f"got {type(model).__name__}"
    )
