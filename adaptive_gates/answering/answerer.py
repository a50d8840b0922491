"""Answering a question with an LLM, with or without retrieved passages.

The prompts follow SKR §1.3: the same prompt either way, with
``Here are some passages:`` and the top passages placed before the question
when the gate chose to retrieve. Passages and question go in through the package's
delimiting scheme (``prompts.quote_passages``, ``prompts.quote_question``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from ..records.answer_metrics import first_line
from ..records.validation import MAX_CONCURRENCY, MAX_NEW_TOKENS, check_count
from .prompts import QA, RETRIEVAL_QA, fill, quote_passages, quote_question

if TYPE_CHECKING:
    from ..models.chat.base import ChatModel, ChatReply, TokenLogprob, TokenUsage
    from ..models.lm.local import LocalCausalLM

DEFAULT_INSTRUCTION = "Answer the following question with one or few words."
#: New tokens at most per answer: the answers asked for are a few words.
DEFAULT_MAX_NEW_TOKENS = 24
#: Where a short answer ends: the answerer's stop strings, and those of the SeaKR
#: samples measured against its answers.
ANSWER_STOP: tuple[str, ...] = ("\n",)


@runtime_checkable
class Answerer(Protocol):
    """Produces short answers, optionally grounded in passages."""

    def answer_batch(self, questions: Sequence[str], passages: Sequence[Sequence[str]] | None = None) -> list[str]:
        """One answer per question; ``passages[i]`` are question i's passages."""
        ...


@runtime_checkable
class ReplyAnswerer(Answerer, Protocol):
    """An ``Answerer`` that also gives each answer's reply (tokens, usage), as
    ``LLMAnswerer`` does; collection then records log-probs and token counts."""

    def answer_replies(
        self,
        questions: Sequence[str],
        passages: Sequence[Sequence[str]] | None = None,
        *,
        top_logprobs: int = 0,
    ) -> list[Answer]:
        """One ``Answer`` per question, with ``top_logprobs`` alternatives per token."""
        ...


@dataclass(frozen=True)
class Answer:
    """A short answer and the reply it was read from: ``text`` is the cleaned answer,
    ``reply`` the model's raw reply with its tokens (when log-probs were asked for and
    the backend gives them) and its token usage (when the backend says)."""

    text: str
    reply: ChatReply

    @property
    def tokens(self) -> tuple[TokenLogprob, ...] | None:
        """The reply's tokens with their log-probabilities, or ``None``."""
        return self.reply.tokens

    @property
    def usage(self) -> TokenUsage | None:
        """What the request cost in tokens, or ``None``."""
        return self.reply.usage


def build_prompt(
    question: str,
    passages: Sequence[str] | None = None,
    instruction: str = DEFAULT_INSTRUCTION,
    max_passage_chars: int = 600,
) -> str:
    """The user message for one question (SKR §1.3 layout): the passages numbered, each
    quoted on its line (``prompts.quote_passages``), the question quoted on its line
    (``prompts.quote_question``)."""
    return _layout(quote_question(question), passages, instruction, max_passage_chars)


def prompt_template(instruction: str = DEFAULT_INSTRUCTION) -> str:
    """``build_prompt`` without passages as a ``prompts.fill`` template: its ``{question}``
    slot is quoted when filled, so ``fill(prompt_template(), question=q) == build_prompt(q)``."""
    return _layout("{question}", None, instruction, 0)


def _layout(quoted_question: str, passages: Sequence[str] | None, instruction: str, max_passage_chars: int) -> str:
    parts = [instruction]
    if passages:
        parts.append("Here are some passages:")
        parts.append(quote_passages(passages, max_passage_chars))
    parts.append(f"Question: {quoted_question}")
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
        max_workers: requests in flight at once to a remote chat model (a local model
            generates ``batch_size`` questions together instead).

    Raises:
        TypeError: ``model`` is neither a ``LocalCausalLM`` nor a chat model.
    """

    def __init__(
        self,
        model: ChatModel | LocalCausalLM | None = None,
        *,
        style: str = "skr",
        instruction: str = DEFAULT_INSTRUCTION,
        max_new_tokens: int = DEFAULT_MAX_NEW_TOKENS,
        max_passage_chars: int = 600,
        batch_size: int = 8,
        max_workers: int = 1,
    ) -> None:
        if style not in ("skr", "when-to-retrieve"):
            raise ValueError(f"style must be 'skr' or 'when-to-retrieve', got {style!r}")
        check_count(max_workers, "max_workers", MAX_CONCURRENCY)
        check_count(max_new_tokens, "max_new_tokens", MAX_NEW_TOKENS)
        self._chat = _as_chat_model(model, batch_size)
        self.style = style
        self.instruction = instruction
        self.max_new_tokens = max_new_tokens
        self.max_passage_chars = max_passage_chars
        self.max_workers = max_workers

    @property
    def chat(self) -> ChatModel:
        """The chat model answering (a local LM arrives wrapped in a ``LocalChatModel``)."""
        return self._chat

    def prompt(self, question: str, passages: Sequence[str] | None = None) -> str:
        """The user message for one question."""
        if self.style == "skr":
            return build_prompt(question, passages, self.instruction, self.max_passage_chars)
        if not passages:
            return fill(QA, question=question)
        return fill(RETRIEVAL_QA, question=question, paras=quote_passages(passages, self.max_passage_chars))

    def answer(self, question: str, passages: Sequence[str] | None = None) -> str:
        """Answer one question."""
        return self.answer_batch([question], [passages] if passages is not None else None)[0]

    def answer_batch(self, questions: Sequence[str], passages: Sequence[Sequence[str]] | None = None) -> list[str]:
        """Answer a batch; with ``passages`` each question gets its own passages."""
        return [a.text for a in self.answer_replies(questions, passages)]

    def answer_replies(
        self,
        questions: Sequence[str],
        passages: Sequence[Sequence[str]] | None = None,
        *,
        top_logprobs: int = 0,
    ) -> list[Answer]:
        """``answer_batch`` with each answer's reply: its tokens with log-probabilities
        (``top_logprobs`` alternatives per position; ``0`` asks for none) and its token
        usage. Up to ``max_workers`` requests are in flight; the first failure is raised."""
        from ..models.chat.base import ChatOptions, user
        from ..models.chat.batch import chat_many

        if passages is not None and len(passages) != len(questions):
            raise ValueError(f"got {len(passages)} passage lists for {len(questions)} questions")
        conversations = [
            user(self.prompt(q, passages[i] if passages is not None else None)) for i, q in enumerate(questions)
        ]
        options = ChatOptions(max_tokens=self.max_new_tokens, stop=list(ANSWER_STOP))
        if top_logprobs:  # asked for only when wanted: a minimal chat model need not take the option
            options["top_logprobs"] = top_logprobs
        replies = chat_many(self.chat, conversations, max_workers=self.max_workers, **options)
        return [Answer(clean_answer(r.text), r) for r in replies]


def _as_chat_model(model: ChatModel | LocalCausalLM | None, batch_size: int) -> ChatModel:
    """``model`` as a chat model: a local LM (or ``None``, the embedded one) is wrapped.

    A local LM is recognised by its type rather than by the ``ChatModel`` protocol: a
    runtime protocol check only sees that attributes exist, not what they hold.
    """
    from ..models.chat.local import LocalChatModel
    from ..models.lm.local import LocalCausalLM

    if model is None or isinstance(model, LocalCausalLM):
        return LocalChatModel(model, batch_size=batch_size)
    if callable(getattr(model, "chat", None)) and hasattr(model, "model_id"):
        return model
    raise TypeError(
        f"model must be a ChatModel (with a chat() method and a model_id) or a LocalCausalLM, "
        f"got {type(model).__name__}"
    )
