"""SKR's prompt-elicited self-knowledge (SPEC §1.2): ask the LLM whether it needs help.

- ``SKRPromptGate``: the question with "Do you need additional information to answer
  this question?"; a reply starting with "No" means known, anything else retrieves.
- ``SKRIclGate``: the same after a few answered demonstrations from the SKR memory
  (known questions answered "No, ...", unknown ones "Yes, ..."), nearest to the
  question by embedding.

Both read the reply's first word, which decides until the gate is calibrated; with
token log-probabilities they also weigh the two polar words at that position, which
grades the need score within the stated word's side of 0.5 (beyond the paper), so a
calibrated threshold can order questions by it.
"""

from __future__ import annotations

import logging
import math
import re
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ..answering.prompts import SKR_KNOWN_DEMO, SKR_PROMPT, SKR_UNKNOWN_DEMO, fill
from ..models.chat.base import ChatModel, ChatOptions, ChatReply, TokenLogprob
from ..models.protocols import Embedder
from ..records.selfknowledge import KNOWN, UNKNOWN
from ..signals.word_choice import STATED_WORD_THRESHOLD, graded_need, word_share, word_start_token
from .base.asking import DEFAULT_DEADLINE, AsksInRounds, Round, Rounds, describe_failure
from .base.assessment import Assessment
from .base.constraints import Integer, OneOf, Text
from .base.gate import Gate
from .skr import MemoryFactory, _SKRMemoryGate

logger = logging.getLogger(__name__)

_FIRST_WORD = re.compile(r"[^\W_]+")
_POLAR = ("yes", "no")
#: The first search for nearest demonstrations asks for this many per demonstration.
_SEARCH_DEPTH = 4


def polar_need(reply: ChatReply, known_reply: str) -> tuple[float, dict[str, Any]]:
    """Need score of a yes/no reply and its evidence.

    Paper rule: known iff the reply's first word is ``known_reply``; anything else
    retrieves. That stated word decides the side of 0.5 (see ``word_choice.graded_need``).
    When the first word is "yes" or "no" and token log-probs are given, the score is
    graded by ``p_retrieve`` = P(other word) / (P(known word) + P(other word)) among the
    alternatives at the token where that word begins.
    """
    first = _first_word(reply.text)
    word = first.group().lower() if first else ""
    known = word == known_reply
    other = "yes" if known_reply == "no" else "no"
    p_retrieve = _polar_share(reply.tokens, word, other, known_reply) if word in _POLAR else None
    evidence: dict[str, Any] = {"reply": reply.text, "first_word": word, "known": known, "p_retrieve": p_retrieve}
    return graded_need(not known, p_retrieve), evidence


def _first_word(text: str) -> re.Match[str] | None:
    """The reply's first word, after an echoed "A:" of the prompt."""
    body = len(text) - len(text.lstrip())
    if text.startswith("A:", body):
        body += 2
    return _FIRST_WORD.search(text, body)


def _polar_share(tokens: tuple[TokenLogprob, ...] | None, word: str, other: str, known_reply: str) -> float | None:
    """P(other) / (P(other) + P(known_reply)) at the token where the first word begins;
    ``None`` without log-probs or when the tokens do not begin that word."""
    if not tokens:
        return None
    first = _first_word("".join(t.token for t in tokens))
    if first is None or first.group().lower() != word:
        return None
    position = word_start_token(tokens, first.start(), word)
    return None if position is None else word_share(tokens[position], (other,), (known_reply,))


def _alternate(texts: Sequence[str], labels: Sequence[int] | np.ndarray, per_class: int) -> list[tuple[str, int]]:
    """The first ``per_class`` known and unknown questions of a ranking, alternating
    (known first); fewer when a class has fewer."""
    known = [t for t, label in zip(texts, labels) if label == KNOWN][:per_class]
    unknown = [t for t, label in zip(texts, labels) if label == UNKNOWN][:per_class]
    return [demo for pair in zip([(q, KNOWN) for q in known], [(q, UNKNOWN) for q in unknown]) for demo in pair]


class _PolarQuestionMixin(AsksInRounds):
    """Scoring shared by the two gates: ask each question's conversation, read the polar reply."""

    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "template": Text("question"),
        "known_reply": OneOf(*_POLAR),
        "max_tokens": Integer(1),
        "top_logprobs": Integer(0),
    }
    known_reply: str
    max_tokens: int
    top_logprobs: int
    if TYPE_CHECKING:  # the Gate it mixes into provides it
        name: ClassVar[str]

    def _configure(
        self,
        chat: ChatModel | None,
        template: str,
        known_reply: str,
        max_tokens: int,
        top_logprobs: int,
        max_workers: int,
        deadline: float | None,
    ) -> None:
        """Keep the parameters both gates take."""
        self._keep_asking(chat, max_workers, deadline)
        self.template = template
        self.known_reply = known_reply
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs

    def _default_threshold(self) -> float:
        return STATED_WORD_THRESHOLD  # the model's own yes/no decides

    def _prompts(self, questions: list[str]) -> list[tuple[list[dict[str, str]], dict[str, Any]]]:
        """Each question's conversation, with the evidence known before asking it."""
        raise NotImplementedError

    def _rounds(self, questions: list[str]) -> Rounds:
        prompts = self._prompts(questions)
        replies = yield Round(
            [conversation for conversation, _ in prompts],
            self.name,
            ChatOptions(max_tokens=self.max_tokens, temperature=0.0, top_logprobs=self.top_logprobs),
        )
        scores: list[float] = []
        details: list[dict[str, Any]] = []
        fallbacks: list[str | None] = []
        for (_, known), reply in zip(prompts, replies):
            if isinstance(reply, Exception):
                scores.append(math.nan)
                details.append(dict(known))
                fallbacks.append(describe_failure(reply))
            else:
                score, evidence = polar_need(reply, self.known_reply)
                scores.append(score)
                details.append({**evidence, **known})
                fallbacks.append(None)
        return Assessment(
            np.array(scores, dtype=np.float64), details, fallbacks=fallbacks, llm_calls=[1.0] * len(prompts)
        )


class SKRPromptGate(_PolarQuestionMixin, Gate):
    """SKR-prompt: the LLM is asked whether it needs additional information.

    Need score: 0 when the reply's first word is ``known_reply``, 1 otherwise; with
    token log-probabilities and a "yes"/"no" first word, the probability of the other
    word, kept on the stated word's side of 0.5. So until the gate is calibrated
    (threshold 0.5) the stated word decides, as in the paper; a calibrated threshold
    moves along the graded order.

    Args:
        chat: the chat model (default: the embedded SmolLM2).
        template: the question line (``{question}`` slot); the paper's Table 2
            alternatives are in ``prompts.SKR_ALTERNATIVES``.
        known_reply: the reply word that means "known": ``"no"`` for "Do you need ...",
            ``"yes"`` for "Can you answer ...".
        max_tokens: reply length cap (only the first word is read).
        top_logprobs: alternatives per token for the graded score (0: discrete).
        max_workers: concurrent requests for backends without batching.
        deadline: seconds one decision (or batch) may wait on such a backend, all
            requests and retries included (``None``: no limit); see ``ChatBackend``.
        fallback_retrieve: the decision taken when a question or the backend fails.
    """

    name = "skr-prompt"

    def __init__(
        self,
        chat: ChatModel | None = None,
        *,
        template: str = SKR_PROMPT,
        known_reply: str = "no",
        max_tokens: int = 8,
        top_logprobs: int = 20,
        max_workers: int = 1,
        deadline: float | None = DEFAULT_DEADLINE,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self._configure(chat, template, known_reply, max_tokens, top_logprobs, max_workers, deadline)

    @property
    def is_fitted(self) -> bool:
        return True

    def _prompts(self, questions: list[str]) -> list[tuple[list[dict[str, str]], dict[str, Any]]]:
        return [([{"role": "user", "content": fill(self.template, question=q)}], {}) for q in questions]


class SKRIclGate(_PolarQuestionMixin, _SKRMemoryGate):
    """SKR-icl: the prompt gate after demonstrations drawn from an SKR memory.

    Fit it like the kNN gate (``fit`` / ``fit_outcomes`` / ``add``). Each question gets
    ``n_demos`` demonstrations alternating known and unknown past questions, as
    user/assistant turns answered with the paper's two sentences; ``demos="nearest"``
    picks those nearest to the question by embedding, ``"fixed"`` the first of each
    class for every question.

    Args:
        chat, template, known_reply, max_tokens, top_logprobs, max_workers, deadline:
            as ``SKRPromptGate``.
        embedder: the sentence encoder of the memory (default: embedded MiniLM).
        n_demos: demonstrations per question (even; half from each class).
        demos: ``"nearest"`` or ``"fixed"``.
        memory: as ``SKRKnnGate``.
        fallback_retrieve: the decision taken when a question or the backend fails.
    """

    name = "skr-icl"
    backend_params = frozenset({"chat", "embedder", "memory"})
    _parameter_constraints: ClassVar[dict[str, Any]] = {"n_demos": Integer(2), "demos": OneOf("nearest", "fixed")}

    def __init__(
        self,
        chat: ChatModel | None = None,
        embedder: Embedder | None = None,
        *,
        template: str = SKR_PROMPT,
        known_reply: str = "no",
        n_demos: int = 4,
        demos: str = "nearest",
        max_tokens: int = 8,
        top_logprobs: int = 20,
        max_workers: int = 1,
        deadline: float | None = DEFAULT_DEADLINE,
        memory: MemoryFactory | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(embedder, memory=memory, fallback_retrieve=fallback_retrieve)
        self._configure(chat, template, known_reply, max_tokens, top_logprobs, max_workers, deadline)
        self.n_demos = n_demos
        self.demos = demos

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if params["n_demos"] % 2:  # half from each class
            raise ValueError(f"n_demos must be an even number >= 2, got {params['n_demos']}")

    def _save_state(self, directory: Path) -> dict[str, Any]:
        # the memory's state (the gate after AsksInRounds in line), then the chat model's record
        return {**super(AsksInRounds, self)._save_state(directory), **super()._save_state(directory)}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        super()._load_state(directory, state)  # the chat model's record (AsksInRounds)
        super(AsksInRounds, self)._load_state(directory, state)  # the memory

    def _demo_reply(self, label: int) -> str:
        """The paper's demonstration answers, flipped for a "yes means known" template."""
        if self.known_reply == "no":
            return SKR_KNOWN_DEMO if label == KNOWN else SKR_UNKNOWN_DEMO
        return "Yes." if label == KNOWN else "No."

    def _demonstrations(self, questions: list[str]) -> list[list[tuple[str, int]]]:
        """``(question, label)`` demonstrations for each question, alternating classes."""
        per_class = self.n_demos // 2
        if self.demos == "fixed":
            _, labels, texts = self._entries()
            return [_alternate(texts, labels, per_class)] * len(questions)
        return self._nearest_demonstrations(self._embed(questions), per_class)

    def _nearest_demonstrations(self, vectors: np.ndarray, per_class: int) -> list[list[tuple[str, int]]]:
        """The ``per_class`` nearest known and unknown past questions of each query,
        from searches of the memory widened until each class has enough (or all is seen)."""
        memory = self.memory_
        chosen: list[list[tuple[str, int]] | None] = [None] * len(vectors)
        pending = np.arange(len(vectors))
        k = _SEARCH_DEPTH * self.n_demos
        while pending.size:
            size = len(memory)
            _, labels, texts = self._search(vectors[pending], k)
            short = []
            for i, row_labels, row_texts in zip(pending, labels, texts):
                demos = _alternate(row_texts, row_labels, per_class)
                if len(demos) < 2 * per_class and k < size:
                    short.append(i)
                else:
                    chosen[i] = demos
            pending, k = np.array(short, dtype=int), 2 * k
        done = [demos for demos in chosen if demos is not None]
        assert len(done) == len(chosen)  # the searches stop once every query has its demonstrations
        return done

    def _prompts(self, questions: list[str]) -> list[tuple[list[dict[str, str]], dict[str, Any]]]:
        prompts = []
        for question, demos in zip(questions, self._demonstrations(questions)):
            turns: list[dict[str, str]] = []
            for demo_question, label in demos:
                turns.append({"role": "user", "content": fill(self.template, question=demo_question)})
                turns.append({"role": "assistant", "content": self._demo_reply(label)})
            turns.append({"role": "user", "content": fill(self.template, question=question)})
            prompts.append((turns, {"demonstrations": [{"question": q, "label": int(label)} for q, label in demos]}))
        return prompts
