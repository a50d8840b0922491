"""SKR's prompt-elicited self-knowledge (SPEC §1.2): ask the LLM whether it needs help.

- ``SKRPromptGate``: the question with "Do you need additional information to answer
  this question?"; a reply starting with "No" means known, anything else retrieves.
- ``SKRIclGate``: the same after a few answered demonstrations from the SKR memory
  (known questions answered "No, ...", unknown ones "Yes, ..."), nearest to the
  question by embedding.

Both read the reply's first word; with token log-probabilities they also weigh the
two polar words at that position, which makes a graded need score (beyond the paper).
"""

from __future__ import annotations

import logging
import math
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..models.chat import ChatModel, ChatReply, TokenLogprob
from ..models.protocols import Embedder
from ..prompts import SKR_KNOWN_DEMO, SKR_PROMPT, SKR_UNKNOWN_DEMO, fill
from ..selfknowledge import KNOWN, UNKNOWN
from .base import FALLBACK_REASON, Gate
from .chat_backed import DEFAULT_DEADLINE, ChatBackend, describe_failure
from .skr import _SKRMemoryGate
from .skr_memory import l2_normalise

logger = logging.getLogger(__name__)

_FIRST_WORD = re.compile(r"[^\W_]+")
_POLAR = ("yes", "no")


def polar_need(reply: ChatReply, known_reply: str) -> tuple[float, dict[str, Any]]:
    """Need score of a yes/no reply and its evidence.

    Paper rule: known iff the reply's first word is ``known_reply``; otherwise
    retrieve (score 1). When the reply starts with "yes" or "no" and log-probs are
    given, the score is instead P(other) / (P(known) + P(other)) over the two words'
    alternatives at that token, which agrees with the word read and grades it.
    """
    match = _FIRST_WORD.search(reply.text.removeprefix("A:"))
    first = match.group().lower() if match else ""
    known = first == known_reply
    evidence: dict[str, Any] = {"reply": reply.text, "first_word": first, "known": known}
    p_retrieve = _polar_probability(reply.tokens, known_reply)
    evidence["p_retrieve"] = p_retrieve
    if p_retrieve is not None and first in _POLAR:
        return p_retrieve, evidence
    return (0.0 if known else 1.0), evidence


def _polar_probability(tokens: tuple[TokenLogprob, ...] | None, known_reply: str) -> float | None:
    """P(other polar word) / (P(yes) + P(no)) among the first content token's alternatives."""
    if not tokens:
        return None
    first = next((t for t in tokens if t.token.strip() and t.token.strip() != "A:"), None)
    if first is None:
        return None
    mass = dict.fromkeys(_POLAR, 0.0)
    for alternative, logprob in first.top or ((first.token, first.logprob),):
        word = alternative.strip().strip(",.").lower()
        if word in mass:
            mass[word] += math.exp(logprob)
    total = sum(mass.values())
    if total == 0:
        return None
    other = "yes" if known_reply == "no" else "no"
    return mass[other] / total


class _PolarQuestionMixin:
    """Scoring shared by the two gates: ask each conversation, read the polar reply."""

    _backend: ChatBackend
    known_reply: str
    max_tokens: int
    top_logprobs: int

    def _configure(
        self, chat: ChatModel | None, template: str, known_reply: str, max_tokens: int,
        top_logprobs: int, max_workers: int, deadline: float | None,
    ) -> None:
        """Validate and keep the parameters both gates take."""
        if "{question}" not in template:
            raise ValueError("template must contain the {question} slot")
        if known_reply not in _POLAR:
            raise ValueError(f"known_reply must be 'yes' or 'no', got {known_reply!r}")
        if max_tokens < 1 or top_logprobs < 0:
            raise ValueError(f"need max_tokens >= 1 and top_logprobs >= 0, got {max_tokens}, {top_logprobs}")
        self._backend = ChatBackend(chat, max_workers=max_workers, deadline=deadline)
        self.template = template
        self.known_reply = known_reply
        self.max_tokens = max_tokens
        self.top_logprobs = top_logprobs
        self.max_workers = max_workers
        self.deadline = deadline

    def _polar_params(self) -> dict[str, Any]:
        return {
            "template": self.template, "known_reply": self.known_reply, "max_tokens": self.max_tokens,
            "top_logprobs": self.top_logprobs, "max_workers": self.max_workers,
            "deadline": self.deadline, "fallback_retrieve": self.fallback_retrieve,  # type: ignore[attr-defined]
        }

    def _default_threshold(self) -> float:
        return 0.5  # the model's own yes/no decides

    def _ask_polar(self, conversations: list[list[dict[str, str]]]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        replies = self._backend.ask(
            conversations, max_tokens=self.max_tokens, temperature=0.0, top_logprobs=self.top_logprobs
        )
        scores, details = [], []
        for reply in replies:
            if isinstance(reply, Exception):
                scores.append(math.nan)
                details.append({FALLBACK_REASON: describe_failure(reply)})
            else:
                score, evidence = polar_need(reply, self.known_reply)
                scores.append(score)
                details.append(evidence)
        return np.array(scores, dtype=np.float64), details


class SKRPromptGate(_PolarQuestionMixin, Gate):
    """SKR-prompt: the LLM is asked whether it needs additional information.

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

    def _json_params(self) -> dict[str, Any]:
        return self._polar_params()

    def _save_state(self, directory: Path) -> dict[str, Any]:
        return self._backend.state()

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        self._backend.check_state(directory, state)

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        return self._ask_polar([[{"role": "user", "content": fill(self.template, question=q)}] for q in questions])


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
        fallback_retrieve: the decision taken when a question or the backend fails.
    """

    name = "skr-icl"

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
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(embedder, fallback_retrieve=fallback_retrieve)
        self._configure(chat, template, known_reply, max_tokens, top_logprobs, max_workers, deadline)
        if n_demos < 2 or n_demos % 2:
            raise ValueError(f"n_demos must be an even number >= 2, got {n_demos}")
        if demos not in ("nearest", "fixed"):
            raise ValueError(f"demos must be 'nearest' or 'fixed', got {demos!r}")
        self.n_demos = n_demos
        self.demos = demos

    def _json_params(self) -> dict[str, Any]:
        return {**self._polar_params(), "n_demos": self.n_demos, "demos": self.demos}

    def _save_state(self, directory: Path) -> dict[str, Any]:
        return {**super()._save_state(directory), **self._backend.state()}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        self._backend.check_state(directory, state)
        super()._load_state(directory, state)

    def _demo_reply(self, label: int) -> str:
        """The paper's demonstration answers, flipped for a "yes means known" template."""
        if self.known_reply == "no":
            return SKR_KNOWN_DEMO if label == KNOWN else SKR_UNKNOWN_DEMO
        return "Yes." if label == KNOWN else "No."

    def _demonstrations(self, questions: list[str]) -> list[list[tuple[str, int]]]:
        """``(question, label)`` demonstrations for each question, alternating classes."""
        memory = self.memory_
        texts, labels = memory.questions, memory.labels
        per_class = self.n_demos // 2
        if self.demos == "fixed":
            order = [list(range(len(texts)))] * len(questions)
        else:
            order = self._nearest_order(questions)
        chosen = []
        for ranking in order:
            known = [texts[j] for j in ranking if labels[j] == KNOWN][:per_class]
            unknown = [texts[j] for j in ranking if labels[j] == UNKNOWN][:per_class]
            pairs = [(q, KNOWN) for q in known], [(q, UNKNOWN) for q in unknown]
            chosen.append([demo for pair in zip(*pairs) for demo in pair])
        return chosen

    def _nearest_order(self, questions: list[str]) -> list[list[int]]:
        """Memory indices by cosine similarity to each question (nearest first)."""
        sims = l2_normalise(self._embed(questions)) @ self.memory_.embeddings().T
        return [np.argsort(-row, kind="stable").tolist() for row in sims]

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        demonstrations = self._demonstrations(questions)
        conversations = []
        for question, demos in zip(questions, demonstrations):
            turns: list[dict[str, str]] = []
            for demo_question, label in demos:
                turns.append({"role": "user", "content": fill(self.template, question=demo_question)})
                turns.append({"role": "assistant", "content": self._demo_reply(label)})
            turns.append({"role": "user", "content": fill(self.template, question=question)})
            conversations.append(turns)
        scores, details = self._ask_polar(conversations)
        for detail, demos in zip(details, demonstrations):
            detail["demonstrations"] = [{"question": q, "label": int(label)} for q, label in demos]
        return scores, details
