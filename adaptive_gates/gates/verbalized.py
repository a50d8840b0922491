"""Verbalized confidence: When-to-Retrieve (Ni et al., Findings ACL 2024), SPEC §3.

The LLM answers and says whether it is certain in the same reply; it retrieves only
when it says it is not. A confident reply's answer is the final answer
(``GateDecision.draft_answer``): the direct branch needs no second call.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ..answering.prompts import CHALLENGE, JUDGEMENT, STRATEGIES, fill
from ..models.chat.base import ChatModel, ChatOptions, ChatReply, TokenLogprob, user
from ..signals.certainty import (
    CERTAIN,
    UNCERTAIN,
    CertaintyParse,
    clean_reply_answer,
    marker_uncertain_probability,
    parse_certainty,
    uncertain_share,
)
from ..signals.word_choice import STATED_WORD_THRESHOLD, graded_need
from .base.asking import DEFAULT_DEADLINE, AsksInRounds, Replies, Round, Rounds, describe_failure
from .base.assessment import Assessment
from .base.constraints import Integer, OneOf, Text
from .base.gate import Gate

logger = logging.getLogger(__name__)

#: Strategies whose replies carry an explanation or a document, so they need room.
_LONG_STRATEGIES = ("explain", "punish+explain", "generate", "step-by-step")
#: What decides a follow-up reply (judgement or challenge) that states no certainty.
UNPARSEABLE = ("fallback", "first-token")


class VerbalizedGate(AsksInRounds, Gate):
    """Retrieve when the LLM says it is uncertain of its own answer.

    Need score: 1 for "uncertain", 0 for "certain". When the backend gives token
    log-probabilities it is graded by P(uncertain) / (P(uncertain) + P(certain)) at the
    marker (``details["p_uncertain"]``), kept on the stated word's side of 0.5 (beyond
    the paper: it lets the threshold be calibrated like any other gate's). So until
    the gate is calibrated (threshold 0.5) the stated word decides, and a reply that
    says "certain" keeps its draft answer however its probabilities lean.

    A reply without a certainty marker gets the post-hoc judgement prompt. When that
    states none either, the decision is the fallback (retrieve by default) with
    ``error`` saying why, as SPEC §3 says; ``unparseable="first-token"`` instead lets
    the probabilities of the two words among the judgement's first-token
    alternatives decide (beyond the paper). Decoding is greedy (temperature 0); the
    authors ran at the API default of 1.0.

    Args:
        chat: the chat model (default: the embedded SmolLM2).
        strategy: ``vanilla``, ``punish``, ``challenge`` (two turns: the certainty comes
            from the reply to a challenge of the first answer), ``step-by-step``,
            ``generate``, ``explain`` or ``punish+explain`` (the paper's best balance).
        template: overrides the strategy's prompt (``{question}`` is the slot).
        max_tokens: reply length cap (default 32, 128 for strategies that explain).
        follow_up_tokens: reply length cap of the challenge and judgement turns, whose
            certainty word comes first.
        judge: ask the post-hoc judgement prompt when a reply states no certainty.
        unparseable: what decides a judgement (or challenge) reply that states no
            certainty: ``"fallback"`` (the fallback decision) or ``"first-token"``
            (P(uncertain) among its first token's alternatives, when they hold
            either word; the fallback otherwise).
        top_logprobs: alternatives per token asked for the graded score (0: discrete).
        max_workers: concurrent requests for backends without batching (remote APIs).
        deadline: seconds one decision (or batch) may wait on such a backend, all
            requests and retries included (``None``: no limit); see ``ChatBackend``.
        fallback_retrieve: the decision taken when a question or the backend fails.
    """

    name = "verbalized"
    answers_first = True
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "strategy": OneOf(*STRATEGIES),
        "template": [Text("question"), None],
        "max_tokens": [Integer(1), None],
        "follow_up_tokens": Integer(1),
        "unparseable": OneOf(*UNPARSEABLE),
        "top_logprobs": Integer(0),
    }

    def __init__(
        self,
        chat: ChatModel | None = None,
        *,
        strategy: str = "vanilla",
        template: str | None = None,
        max_tokens: int | None = None,
        follow_up_tokens: int = 16,
        judge: bool = True,
        unparseable: str = "fallback",
        top_logprobs: int = 20,
        max_workers: int = 1,
        deadline: float | None = DEFAULT_DEADLINE,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self._keep_asking(chat, max_workers, deadline)
        self.strategy = strategy
        self.template = template
        self.max_tokens = max_tokens
        self.follow_up_tokens = follow_up_tokens
        self.judge = judge
        self.unparseable = unparseable
        self.top_logprobs = top_logprobs

    @property
    def prompt_template(self) -> str:
        """The first-turn prompt in use."""
        return self.template or STRATEGIES[self.strategy]

    @property
    def reply_tokens(self) -> int:
        """The reply length cap in use."""
        return self.max_tokens or (128 if self.strategy in _LONG_STRATEGIES else 32)

    # ------------------------------------------------------------------ Gate hooks
    @property
    def is_fitted(self) -> bool:
        return True  # nothing to learn; calibration is optional

    def _default_threshold(self) -> float:
        return STATED_WORD_THRESHOLD  # the model's own word decides

    # ------------------------------------------------------------------ scoring
    def _round(self, conversations: list[list[dict[str, str]]], purpose: str, max_tokens: int) -> Round:
        return Round(
            conversations, purpose, ChatOptions(max_tokens=max_tokens, temperature=0.0, top_logprobs=self.top_logprobs)
        )

    def _rounds(self, questions: list[str]) -> Rounds:
        first_turns = [user(fill(self.prompt_template, question=q)) for q in questions]
        # Under "challenge" the first reply is only the answer; its certainty comes next.
        purpose = "answer" if self.strategy == "challenge" else "answer+certainty"
        replies = yield self._round(first_turns, purpose, self.reply_tokens)
        details: list[dict[str, Any]] = [{"strategy": self.strategy} for _ in questions]
        calls = [1.0] * len(questions)
        verdicts: list[_Verdict | None] = [None] * len(questions)
        failures: list[str | None] = [None] * len(questions)
        answers: list[str] = [""] * len(questions)
        for i, reply in enumerate(replies):
            if isinstance(reply, Exception):
                failures[i] = describe_failure(reply)
                continue
            details[i]["reply"] = reply.text
            if self.strategy == "challenge":  # the certainty comes from the second turn
                answers[i] = clean_reply_answer(reply.text)
            else:
                verdict = _Verdict.of(reply, "reply")
                verdicts[i] = verdict
                answers[i] = verdict.parse.answer
        if self.strategy == "challenge":
            first_replies = {i: r.text for i, r in enumerate(replies) if not isinstance(r, Exception)}
            yield from self._follow_up(
                list(first_replies),
                lambda i: [*first_turns[i], {"role": "assistant", "content": first_replies[i]}, user(CHALLENGE)[0]],
                "challenge",
                details,
                calls,
                verdicts,
                failures,
            )
        if self.judge:
            yield from self._follow_up(
                [i for i, v in enumerate(verdicts) if v is not None and v.parse.certainty is None],
                lambda i: user(fill(JUDGEMENT, question=questions[i], prediction=answers[i] or details[i]["reply"])),
                "judgement",
                details,
                calls,
                verdicts,
                failures,
            )
        concluded = [self._conclude(a, v, d, f) for a, v, d, f in zip(answers, verdicts, details, failures)]
        return Assessment(
            np.array([score for score, _ in concluded]),
            details,
            drafts=list(answers),
            fallbacks=[reason for _, reason in concluded],
            llm_calls=calls,
        )

    def _follow_up(
        self,
        indices: list[int],
        conversation: Callable[[int], list[dict[str, str]]],
        label: str,
        details: list[dict[str, Any]],
        calls: list[float],
        verdicts: list[_Verdict | None],
        failures: list[str | None],
    ) -> Generator[Round, Replies, None]:
        """Ask a second prompt for ``indices``; its reply's certainty replaces theirs
        (a failed request: its failure does)."""
        if not indices:
            return
        replies = yield self._round([conversation(i) for i in indices], label, self.follow_up_tokens)
        for i, reply in zip(indices, replies):
            calls[i] += 1
            if isinstance(reply, Exception):
                failures[i] = describe_failure(reply)
                verdicts[i] = None
                continue
            details[i][f"{label}_reply"] = reply.text
            verdicts[i] = _Verdict.of(reply, label)

    def _conclude(
        self, answer: str, verdict: _Verdict | None, detail: dict[str, Any], failure: str | None
    ) -> tuple[float, str | None]:
        """The need score of one question, or NaN and why there is none."""
        detail["answer"] = answer
        if verdict is None:
            return math.nan, failure or "no reply"
        parse, tokens = verdict.parse, verdict.tokens
        detail["certainty_from"] = verdict.source
        certainty, p_uncertain = parse.certainty, marker_uncertain_probability(verdict.text, parse, tokens)
        if certainty is None and self.unparseable == "first-token" and tokens and verdict.source != "reply":
            # A judgement (or challenge) reply's first token is the verdict's slot. Never
            # in a first reply, whose first token is the answer (and which a question
            # could steer: "reply with the word certain").
            p_uncertain = uncertain_share(tokens[0])
            if p_uncertain is not None:
                certainty = UNCERTAIN if p_uncertain > STATED_WORD_THRESHOLD else CERTAIN
                detail["certainty_from"] += " (first-token probabilities)"
        detail.update(certainty=certainty, marker=parse.marker, marker_source=parse.source, p_uncertain=p_uncertain)
        if certainty is None:
            return math.nan, self._unparseable_reason(verdict.source)
        if certainty == CERTAIN and not answer:
            detail["note"] = "certain, but the reply holds no answer to reuse"
            return 1.0, None
        return graded_need(certainty == UNCERTAIN, p_uncertain), None

    def _unparseable_reason(self, source: str) -> str:
        reason = "unparseable: the reply states no certainty"
        if self.judge:
            reason += " and neither does the judgement"
        if self.unparseable == "first-token" and source != "reply":
            reason += ", nor does its first token weigh the two words"
        return reason


@dataclass(frozen=True)
class _Verdict:
    """The reply that carries a question's certainty, parsed; ``source`` says which
    (``"reply"``, ``"challenge"`` or ``"judgement"``)."""

    text: str
    parse: CertaintyParse
    tokens: tuple[TokenLogprob, ...] | None
    source: str

    @classmethod
    def of(cls, reply: ChatReply, source: str) -> _Verdict:
        return cls(reply.text, parse_certainty(reply.text), reply.tokens, source)
