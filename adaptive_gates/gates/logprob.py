"""Answer first, retrieve when unsure: the uncertainty of the LLM's own no-retrieval
answer, read from its token log-probabilities (docs/logprob_gate.md).

The LLM answers the question as the package's answerer would without retrieval (the
same prompt, greedy, the same stop), asked for ``top_logprobs`` alternatives per
token. The need score is one signal of ``adaptive_gates.signals.token_uncertainty`` over the
answer's tokens. A confident answer is the final answer (``GateDecision.draft_answer``):
the direct branch needs no second call. Offline, ``score_records`` scores the
log-probabilities recorded with outcome records, with no LLM at all.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import numpy as np

from ..answering.answerer import ANSWER_STOP, DEFAULT_INSTRUCTION, build_prompt, clean_answer
from ..errors import LogprobsUnavailableError
from ..models.chat.base import ChatModel, ChatOptions, TokenLogprob, user
from ..records.data import OutcomeRecord
from ..signals.token_uncertainty import SIGNALS, answer_tokens, position_entropy, signal_values
from .base.asking import DEFAULT_DEADLINE, AsksInRounds, Round, Rounds, describe_failure
from .base.assessment import Assessment
from .base.constraints import Integer, OneOf, Text
from .base.gate import Gate

#: The default threshold of each signal (ours, round values; calibrate for your model):
#: retrieve when some answer token's entropy exceeds 2 nats (more spread than a
#: uniform choice among e² ≈ 7.4 tokens), when the tokens' mean entropy exceeds 1 nat,
#: when the answer's perplexity exceeds 2, or (FLARE's rule at θ = 0.5) when some
#: token's probability is below one half.
DEFAULT_THRESHOLDS: dict[str, float] = {
    "max-entropy": 2.0,
    "mean-entropy": 1.0,
    "perplexity": 2.0,
    "min-prob": 0.5,
}

#: How the evidence says which tokens were scored.
_ALL_TOKENS = "all tokens (the reply holds no answer tokens)"


class LogprobGate(AsksInRounds, Gate):
    """Retrieve when the LLM's own answer, written without retrieval, was uncertain.

    Need score (higher = retrieve), over the answer's tokens (``signal``):
    ``max-entropy`` (default; the largest per-token entropy, nats), ``mean-entropy``,
    ``perplexity`` (``exp(-mean log p)``) or ``min-prob`` (``1 - min p``). Per-token
    entropy is over the ``top_logprobs`` alternatives with the mass they leave as one
    bucket (a lower bound of the full entropy); a position without alternatives
    counts its chosen token's surprisal instead (``details["positions_without_alternatives"]``).

    With ``answer_tokens_only`` the end-of-turn and other special tokens,
    punctuation-only tokens, and whitespace-only tokens at either end are left out;
    a reply made of nothing else is scored on all its tokens. The details of a
    decision hold every signal's value (``signals``), the tokens scored
    (``n_tokens``), the reply and its answer (``answer``, which every decision also
    carries as ``answer_without_retrieval``).

    A backend that returns no log-probabilities raises ``LogprobsUnavailableError``
    out of ``score``, ``decide`` and ``decide_batch`` alike (not a fallback: it would
    retrieve on every question and hide the setting to fix). A failed request is a
    fallback decision as with every gate, and so is a reply with no answer (empty or
    whitespace text, or no tokens) or with a log-probability no model could give
    (``token_logprobs.impossible_logprob``: above 0, NaN, or -inf for a chosen token),
    its ``error`` naming what was wrong: none of them is a confident answer.

    Args:
        chat: the chat model (default: the embedded SmolLM2); it must give log-probs.
        signal: one of ``adaptive_gates.signals.token_uncertainty.SIGNALS``.
        answer_tokens_only: score only the answer's own tokens (see above).
        top_logprobs: alternatives asked per token (at least 1; OpenAI allows 20).
        instruction: the answer prompt's first line (the answerer's, by default: keep
            them equal so the draft is the answer the answerer would give).
        max_tokens: the answer's length cap (the answerer's 24 by default).
        max_workers: concurrent requests for backends without batching (remote APIs).
        deadline: seconds one decision (or batch) may wait on such a backend
            (``None``: no limit); see ``ChatBackend``.
        fallback_retrieve: the decision taken when a question or the backend fails.
    """

    name = "logprob"
    answers_first = True
    record_fields = ("logprobs_no_retrieval",)
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "signal": OneOf(*SIGNALS),
        "top_logprobs": Integer(1),  # the gate reads log-probabilities
        "instruction": Text(),
        "max_tokens": Integer(1),
    }

    def __init__(
        self,
        chat: ChatModel | None = None,
        *,
        signal: str = "max-entropy",
        answer_tokens_only: bool = True,
        top_logprobs: int = 20,
        instruction: str = DEFAULT_INSTRUCTION,
        max_tokens: int = 24,
        max_workers: int = 1,
        deadline: float | None = DEFAULT_DEADLINE,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self._keep_asking(chat, max_workers, deadline)
        self.signal = signal
        self.answer_tokens_only = answer_tokens_only
        self.top_logprobs = top_logprobs
        self.instruction = instruction
        self.max_tokens = max_tokens

    # ------------------------------------------------------------------ Gate hooks
    @property
    def is_fitted(self) -> bool:
        return True  # nothing to learn; calibration is optional

    def _default_threshold(self) -> float:
        return DEFAULT_THRESHOLDS[self.signal]

    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str) -> None:
        """Nothing to learn: the gate as it is (so offline evaluation, which fits every
        gate on the training records, treats it like the others; calibrating is apart)."""

    # ------------------------------------------------------------------ scoring
    def prompt(self, question: str) -> str:
        """The answer prompt: the answerer's, without passages."""
        return build_prompt(question, None, self.instruction)

    def _rounds(self, questions: list[str]) -> Rounds:
        options = ChatOptions(
            max_tokens=self.max_tokens, temperature=0.0, top_logprobs=self.top_logprobs, stop=list(ANSWER_STOP)
        )
        replies = yield Round([user(self.prompt(q)) for q in questions], "answer", options)
        scores: list[float] = []
        details: list[dict[str, Any]] = []
        drafts: list[str | None] = []
        fallbacks: list[str | None] = []
        for reply in replies:
            if isinstance(reply, Exception):
                scores.append(math.nan)
                details.append({})
                drafts.append(None)
                fallbacks.append(describe_failure(reply))
                continue
            answer = clean_answer(reply.text)
            if not answer:  # nothing was answered, so there is no certainty to read
                scores.append(math.nan)
                details.append({"reply": reply.text})
                drafts.append(None)
                fallbacks.append(f"the reply holds no answer: {reply.text!r}")
                continue
            if reply.tokens is None:
                raise LogprobsUnavailableError(
                    f"{self.name}: chat model {self.chat_model.model_id!r} returned no token log-probabilities; "
                    "this gate needs them: use a backend that gives them (OpenAI-compatible servers do with "
                    "logprobs=True, which the core's OpenAIChatModel sends; the framework adapters need "
                    "request_logprobs=True and a model that returns them)"
                )
            score, detail = self._score_tokens(reply.tokens)
            detail["reply"] = reply.text
            detail["answer"] = answer
            scores.append(score)
            details.append(detail)
            drafts.append(answer)
            fallbacks.append("the reply has no tokens to score" if math.isnan(score) else None)
        return Assessment(
            np.array(scores, dtype=np.float64),
            details,
            drafts=drafts,
            fallbacks=fallbacks,
            llm_calls=[1.0] * len(questions),  # one answer each, failed or not
        )

    def _score_tokens(self, tokens: Sequence[TokenLogprob]) -> tuple[float, dict[str, Any]]:
        """The need score of an answer's tokens and its evidence (NaN for no tokens)."""
        scored, which = list(tokens), "all tokens"
        if self.answer_tokens_only:
            scored = answer_tokens(tokens)
            which = "answer tokens"
            if not scored:
                scored, which = list(tokens), _ALL_TOKENS
        detail: dict[str, Any] = {"signal": self.signal, "n_tokens": len(scored), "scored": which}
        if not scored:
            return math.nan, detail
        values = signal_values(scored)
        detail["signals"] = values
        detail["positions_without_alternatives"] = sum(1 for t in scored if not t.top)
        detail["max_entropy_token"] = max(scored, key=position_entropy).token
        return values[self.signal], detail

    def score_records(self, records: Sequence[OutcomeRecord]) -> np.ndarray:
        """Need scores from the log-probabilities recorded with each record's
        no-retrieval answer (``logprobs_no_retrieval``), asking no LLM.

        Raises:
            ValueError: a record holds no log-probabilities, or none to score.
        """
        scores = np.empty(len(records), dtype=np.float64)
        for i, record in enumerate(records):
            if record.logprobs_no_retrieval is None:
                raise ValueError(
                    f"{self.name}: record {record.id!r} has no 'logprobs_no_retrieval'; this gate scores the "
                    "recorded log-probabilities of the no-retrieval answer"
                )
            scores[i], _ = self._score_tokens(record.logprobs_no_retrieval)
            if math.isnan(scores[i]):
                raise ValueError(f"{self.name}: record {record.id!r} has an empty 'logprobs_no_retrieval'")
        return scores


__all__ = ["DEFAULT_THRESHOLDS", "LogprobGate"]
