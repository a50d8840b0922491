"""Shadow learning in the server (``serve --shadow-rate R``): the gate learns the
upstream LLM from the decisions it serves (``gates.shadow`` says what and how).

After an answer is sent, for a draft-check gate (one that ``LearnsFromShadows``):

- a question answered over the passages gives its pair at no cost: the draft and the
  answer served, observed with probability 1;
- a question answered by its draft is, with probability R, also answered over the
  passages the gate checked it against (a *shadow* answer: one extra LLM call, the
  gate's own answer prompt and length, never served), observed with probability R.

Each pair is logged with the gate, and every ``refit_every`` of them the gate's
combiner is refitted (``LearnsFromShadows.learn``) and the gate saved
(``after_learning``, as after feedback: the directory swapped whole). Without
``--shadow-rate`` nothing is recorded; with ``--shadow-rate 0`` the pairs of the
questions answered over passages are, and no shadow is asked: no extra LLM call, but
the gate then learns only from the questions it chose to retrieve for
(``benchmarks/shadow_stream.py`` measures both).

None of it touches what the user got: it runs after the reply, in the background; a
shadow answer or a refit that fails is logged and counted, never raised. Shadow answers
are real requests to the upstream: they compete with users' requests for it (an
embedded model answers one at a time).

The recording, the draws and the refits are the core's ``ShadowLearner``
(``gates.shadow.learner``), as in the framework doors; the server adds its admin list,
its upstream's shadow answers and the saving.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from ..answering.answerer import ANSWER_STOP, DEFAULT_INSTRUCTION, build_prompt
from ..gates.base.gate import Gate
from ..gates.shadow.learner import DEFAULT_REFIT_EVERY, ShadowLearner
from ..gates.shadow.observations import Observation, Source
from ..models.chat.base import ChatModel, user
from .records import ServedDecision

logger = logging.getLogger(__name__)

__all__ = ["DEFAULT_REFIT_EVERY", "ServedShadowLearner", "ShadowEntry"]


@dataclass(frozen=True)
class ShadowEntry:
    """A pair the gate learnt from: on which answer (``decision_id``), how it was
    observed, when (seconds since the epoch), and when it was taken back
    (``reverted_at``). ``observation`` is the gate's own entry, the handle to withdraw it by."""

    decision_id: str
    question: str
    source: Source
    helps: float | None
    recorded_at: float
    observation: Observation
    reverted_at: float | None = None

    def to_dict(self) -> dict[str, Any]:
        """The pair as the admin API lists it."""
        o = self.observation
        return {
            "decision_id": self.decision_id,
            "question": self.question,
            "source": self.source,
            "draft": o.draft,
            "answer": o.answer,
            "probability": o.probability,
            "helps": self.helps,
            "recorded_at": self.recorded_at,
            "reverted_at": self.reverted_at,
        }


class ServedShadowLearner(ShadowLearner):
    """The core's ``ShadowLearner`` in the server: the pairs of served decisions, kept
    for the admin API (listed, taken back), the shadows asked of the upstream with the
    gate's own answer prompt and length, the gate saved after each refit and revert.

    Args:
        gate: the served gate; one that does not learn from shadows (not a draft-check
            gate) makes this learner do nothing.
        upstream: the chat model shadow answers are asked of (the one that answers).
        rate: the share R of directly answered questions answered over the passages as
            well; 0: none (the pairs of retrieved questions are still recorded).
        refit_every: pairs between refits.
        after_learning: called (in a worker thread) after a refit or a revert, e.g. to
            save the gate.
        timeout: seconds a shadow answer may take before it is given up (and counted failed).
        seed: the seed of the shadow draws (``None``: unseeded).
        capacity: pairs the admin list keeps.
    """

    def __init__(
        self,
        gate: Gate,
        upstream: ChatModel,
        *,
        rate: float = 0.0,
        refit_every: int = DEFAULT_REFIT_EVERY,
        after_learning: Callable[[], object] | None = None,
        timeout: float = 60.0,
        seed: int | None = None,
        capacity: int = 1_000,
    ) -> None:
        if not timeout > 0 or capacity < 1:
            raise ValueError(f"capacity must be >= 1 and timeout > 0; got {capacity}, {timeout}")
        super().__init__(gate, rate=rate, refit_every=refit_every, seed=seed)
        self.upstream = upstream
        self.after_learning = after_learning
        self.timeout = timeout
        self._lock = asyncio.Lock()  # one pair learnt at a time, and a save after each refit
        self._entries: deque[ShadowEntry] = deque(maxlen=capacity)

    # ------------------------------------------------------------------ after each answer
    def observe(self, served: ServedDecision, answer: str | None) -> None:
        """After ``served`` was answered with ``answer`` (``None`` when unknown): record
        its pair, or draw whether to ask its shadow, in the background. Never raises."""
        try:
            todo = self.plan(served.decision, retrieved=served.route == "retrieve")
            if todo == "retrieved" and answer is not None:
                self.spawn(self._record(served, answer, "retrieved"))
            elif todo == "shadow":
                self.spawn(self._shadow(served))
        except Exception:  # nothing here may reach the user's answer
            logger.exception("shadow learning: recording decision %s failed", served.id)

    async def _shadow(self, served: ServedDecision) -> None:
        """Ask the upstream to answer over the decision's passages, then record the pair."""
        decision = served.decision
        assert decision.question is not None and decision.passages is not None
        gate = self.gate
        instruction = getattr(gate, "instruction", DEFAULT_INSTRUCTION)
        prompt = build_prompt(decision.question, [h.as_passage() for h in decision.passages], instruction)

        async def answer() -> str:
            async with asyncio.timeout(self.timeout):
                reply = await self.upstream.achat(
                    user(prompt),
                    max_tokens=int(getattr(gate, "max_tokens", 24)),
                    temperature=0.0,
                    stop=list(ANSWER_STOP),
                )
            return reply.text

        text = await self.aask(decision, answer)
        if text is not None:
            await self._record(served, text, "shadow")

    async def _record(self, served: ServedDecision, answer: str, source: Source) -> None:
        async with self._lock:
            entry, refitted = await asyncio.to_thread(self.record, served.decision, answer, source)
            if entry is None:
                return
            assert served.decision.question is not None
            self._entries.append(
                ShadowEntry(served.id, served.decision.question, source, entry.helps, time.time(), entry)
            )
            if refitted:
                await self._saved()

    async def _saved(self) -> None:
        if self.after_learning is None:
            return
        try:
            await asyncio.to_thread(self.after_learning)
        except Exception:
            logger.exception("shadow learning: saving the gate failed; it keeps what it learnt in memory")

    # ------------------------------------------------------------------ admin
    def recent(self, limit: int) -> list[ShadowEntry]:
        """The ``limit`` latest pairs, newest first."""
        return list(reversed(self._entries))[:limit]

    async def revert(self, decision_id: str) -> ShadowEntry | None:
        """Take back the pair of ``decision_id``'s answer (as a lesson is taken back): the
        gate withdraws it, refitting without it if it had learnt from it, and is saved.
        ``None``: no pair of that answer is listed.

        Raises:
            ValueError: it was taken back already.
        """
        async with self._lock:
            i = next((i for i, e in enumerate(self._entries) if e.decision_id == decision_id), None)
            if i is None:
                return None
            entry = self._entries[i]
            if entry.reverted_at is not None:
                raise ValueError(f"the pair of decision {decision_id!r} was taken back already")
            assert self.learner is not None
            await asyncio.to_thread(self.learner.withdraw_observation, entry.observation)
            self._entries[i] = entry = replace(entry, reverted_at=time.time())
            await self._saved()
        logger.info("shadow pair of decision %s taken back", decision_id)
        return entry
