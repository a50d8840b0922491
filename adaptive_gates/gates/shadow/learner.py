"""Learning from answered decisions, for any door: ``ShadowLearner`` records the pairs
of a draft-check gate's decisions, asks the shadow answers, and refits the gate
(``gates.shadow`` says what is learnt and how it is weighed).

A door that answers over the passages a decision checked (the server, the LangChain
adaptive-RAG graph, the LlamaIndex adaptive query engine) tells the learner, after the
user has the answer, how it answered:

- ``plan(decision, retrieved)``: what the answer teaches: ``"retrieved"`` (the answer
  made over the decision's passages is the pair's, observed with probability 1),
  ``"shadow"`` (a decision answered without them, drawn with probability R: answer it
  over them too, observed with probability R) or ``None``;
- ``record(decision, answer, source)``: log the pair and refit every ``refit_every``;
- ``after_answer(decision, retrieved, answer, ask)``: both of these after an answer, in the
  learner's worker thread: the pair recorded, or the door's own answer over the
  passages asked (``ask()``) and recorded (the server, whose work lives on its event
  loop, uses ``plan``, ``aask``, ``spawn`` and ``record`` itself).

None of it reaches the user: every failure is logged and counted, never raised. A gate
that does not learn from shadows (not a draft-check gate) makes the learner do nothing.
"""

from __future__ import annotations

import asyncio
import logging
import random
import threading
from collections.abc import Awaitable, Callable
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import wait as wait_futures
from typing import Any

from ...answering.answerer import clean_answer
from ...records.decision import GateDecision
from ..base.gate import Gate
from .learning import LearnsFromShadows
from .observations import Observation, Source

logger = logging.getLogger(__name__)

#: Pairs between refits unless told otherwise: a refit of the shipped-size gate takes
#: a few seconds of CPU; a few dozen pairs move a combiner fitted on thousands of rows.
DEFAULT_REFIT_EVERY = 50


class ShadowLearner:
    """Records the pairs of answered decisions, asks shadow answers, refits the gate.

    Thread-safe: one pair is learnt at a time. What ``after_answer`` leaves runs in one
    worker thread of the learner's, one piece after another (shadows compete with the
    users' requests for the LLM); ``spawn`` runs a coroutine as a task on the running
    event loop (the server's).

    Args:
        gate: the gate deciding; one that does not learn from shadows makes this
            learner do nothing.
        rate: the share R of directly answered decisions answered over their passages
            as well; 0: none (the pairs of retrieved decisions are still recorded).
        refit_every: pairs between refits.
        seed: the seed of the shadow draws (``None``: unseeded).
    """

    def __init__(
        self,
        gate: Gate,
        *,
        rate: float = 0.0,
        refit_every: int = DEFAULT_REFIT_EVERY,
        seed: int | None = None,
    ) -> None:
        if not 0.0 <= rate <= 1.0 or isinstance(refit_every, bool) or refit_every < 1:
            raise ValueError(f"rate must be in [0, 1] and refit_every >= 1; got {rate}, {refit_every}")
        self.gate = gate
        self.rate = rate
        self.refit_every = refit_every
        self.learner: LearnsFromShadows | None = gate if isinstance(gate, LearnsFromShadows) else None
        self._random = random.Random(seed)
        self._learning = threading.Lock()  # one pair learnt at a time
        self._counts_lock = threading.Lock()
        self._executor: ThreadPoolExecutor | None = None
        self._futures: set[Future[Any]] = set()
        self._tasks: set[asyncio.Task[None]] = set()
        self.counts = {
            "retrieved_pairs": 0,
            "shadow_pairs": 0,
            "shadows_asked": 0,
            "shadow_failures": 0,
            "refits": 0,
            "refit_failures": 0,
            "extra_llm_calls": 0,
        }

    @property
    def active(self) -> bool:
        """Whether anything is recorded: the gate learns from answered pairs."""
        return self.learner is not None

    def _count(self, name: str, by: int = 1) -> None:
        with self._counts_lock:
            self.counts[name] += by

    # ------------------------------------------------------------------ what to do
    def plan(self, decision: GateDecision, retrieved: bool) -> Source | None:
        """What ``decision``'s answer teaches: ``"retrieved"`` when the door answered
        over its passages (``retrieved``), ``"shadow"`` for a share ``rate`` of the
        others (drawn here, counted as asked), ``None`` when nothing is to be learnt (no
        learning gate, a fallback decision, one of another gate, or one without a
        question, draft or passages). Never raises."""
        try:
            if self.learner is None or decision.is_fallback or decision.gate != self.gate.name:
                return None
            if decision.passages is None or decision.answer_without_retrieval is None or decision.question is None:
                return None
            if retrieved:
                return "retrieved"
            with self._counts_lock:  # the draws, as the counts, from many threads
                drawn = self.rate > 0 and self._random.random() < self.rate
            if drawn:
                self._count("shadows_asked")
                return "shadow"
        except Exception:  # nothing here may reach the user's answer
            logger.exception("shadow learning: reading a decision of %s failed", self.gate.name)
        return None

    # ------------------------------------------------------------------ recording
    def record(self, decision: GateDecision, answer: str, source: Source) -> tuple[Observation | None, bool]:
        """Log ``decision``'s pair with ``answer`` (its first line, as ``clean_answer``
        reads it), observed with probability 1 (``"retrieved"``) or ``rate``
        (``"shadow"``), then refit if ``refit_every`` pairs arrived since the last refit.
        The gate's entry (``None`` when nothing was recorded) and whether it refitted.
        Blocks (a refit takes CPU); never raises."""
        learner = self.learner
        if learner is None:
            return None, False
        probability = 1.0 if source == "retrieved" else self.rate
        with self._learning:
            try:
                entry = learner.record_pair(decision, clean_answer(answer), source=source, probability=probability)
            except Exception:
                self._count("shadow_failures")
                logger.exception("shadow learning: the pair of a decision on %r was not recorded", decision.question)
                return None, False
            self._count("retrieved_pairs" if source == "retrieved" else "shadow_pairs")
            try:
                refitted = learner.learn(self.refit_every)
            except Exception:
                self._count("refit_failures")
                logger.exception("shadow learning: the refit failed; the gate keeps its combiner")
                return entry, False
            if refitted:
                self._count("refits")
        return entry, refitted

    # ------------------------------------------------------------------ shadows
    def ask(self, decision: GateDecision, answer: Callable[[], str]) -> str | None:
        """``answer()`` (the door's answer over ``decision``'s passages), counted as an
        extra LLM call; ``None`` when it failed (logged and counted)."""
        self._count("extra_llm_calls")
        try:
            return answer()
        except Exception as exc:
            self._shadow_failed(decision, exc)
            return None

    async def aask(self, decision: GateDecision, answer: Callable[[], Awaitable[str]]) -> str | None:
        """``ask`` awaited."""
        self._count("extra_llm_calls")
        try:
            return await answer()
        except Exception as exc:
            self._shadow_failed(decision, exc)
            return None

    def _shadow_failed(self, decision: GateDecision, exc: Exception) -> None:
        self._count("shadow_failures")
        logger.warning("shadow answer to %r failed: %s: %s", decision.question, type(exc).__name__, exc)

    def after_answer(
        self, decision: GateDecision, retrieved: bool, answer: str | None, ask: Callable[[], str] | None = None
    ) -> None:
        """After a door answered ``decision`` (over its passages when ``retrieved``,
        with ``answer``): in the learner's worker thread, record its pair, or, when the
        draw says so, ``ask()`` the door's own answer over its passages and record that.
        Returns at once, so the user's answer waits for none of it; never raises.

        The work runs in a thread, with the door's sync calls, from a door's async path
        too: it outlives the event loop that answered (``asyncio.run`` returning)."""
        try:
            todo = self.plan(decision, retrieved)
            if todo == "retrieved" and answer is not None:
                self._submit(self.record, decision, answer, "retrieved")
            elif todo == "shadow" and ask is not None:
                self._submit(self._shadow_now, decision, ask)
        except Exception:  # nothing here may reach the user's answer
            logger.exception("shadow learning: the pair of a decision on %r was not started", decision.question)

    def _submit(self, work: Callable[..., object], *args: Any) -> None:
        with self._counts_lock:
            if self._executor is None:
                self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="shadow-learning")
            executor = self._executor
        future = executor.submit(work, *args)
        self._futures.add(future)
        future.add_done_callback(self._futures.discard)

    def _shadow_now(self, decision: GateDecision, answer: Callable[[], str]) -> None:
        text = self.ask(decision, answer)
        if text is not None:
            self.record(decision, text, "shadow")

    def spawn(self, work: Any) -> None:
        """``work`` (a coroutine) as a task on the running loop, held until done (the
        loop keeps only a weak reference)."""
        task = asyncio.get_running_loop().create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    # ------------------------------------------------------------------ waiting
    def drain(self, timeout: float | None = None) -> bool:
        """Wait for the work ``after_answer`` left in the worker thread; whether it all ended."""
        futures = list(self._futures)
        return not wait_futures(futures, timeout=timeout).not_done if futures else True

    async def adrain(self) -> None:
        """Wait for the tasks under way on this loop (a test, or a server stopping)."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    def stats(self) -> dict[str, Any]:
        """The counters, the options and the gate's log sizes."""
        with self._counts_lock:
            counts = dict(self.counts)
        log = None if self.learner is None else self.learner.shadow_
        return {
            "rate": self.rate,
            "refit_every": self.refit_every,
            "active": self.active,
            "pairs_recorded": counts["retrieved_pairs"] + counts["shadow_pairs"],
            **counts,
            "observations_logged": None if log is None else len(log),
            "observations_learnt": None if log is None else log.learned,
        }


def door_learner(
    gate: Gate, rate: float | None, refit_every: int = DEFAULT_REFIT_EVERY, learner: ShadowLearner | None = None
) -> ShadowLearner | None:
    """The shadow learner of a framework door given ``shadow_rate`` (``rate``),
    ``shadow_refit_every`` and ``shadow_learner`` (``learner``): the one given, one over
    ``gate`` at ``rate``, or ``None`` (neither: nothing is recorded).

    Raises:
        ValueError: both were given, or ``gate`` does not learn from answered decisions
            (it is not a draft-check gate), or the rate or cadence is out of range.
    """
    if learner is not None:
        if rate is not None:
            raise ValueError("give shadow_rate or shadow_learner, not both")
        return learner
    if rate is None:
        return None
    made = ShadowLearner(gate, rate=rate, refit_every=refit_every)
    if not made.active:
        raise ValueError(
            f"shadow_rate needs a gate that learns from its answered decisions (a draft-check gate); {gate.name!r} "
            "does not"
        )
    return made
