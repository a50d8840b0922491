"""The selective-retrieval chat service behind ``adaptive-gates serve``.

Per request: the gate judges the last user question, made standalone
(``history_window``), the top passages are retrieved when it says so, and the upstream
LLM answers with the package's answer prompt (``answering.build_prompt``), the history
kept; a gate's confident draft answer is served without a second call. Each answer's decision is kept
under an id, so feedback on the answer can teach the gate.

Nothing here knows HTTP: ``app`` maps it to the OpenAI-compatible routes.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncGenerator, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..answering.answerer import DEFAULT_INSTRUCTION, build_prompt
from ..errors import (
    AlreadyJudgedError,
    AlreadyRevertedError,
    BackendMisconfiguredError,
    BackendUnavailableError,
    ContextLengthExceededError,
    ConversationTooLongError,
    FeedbackNotSupportedError,
    FeedbackQuotaError,
    GateBackendError,
    MemoryUnavailableError,
    NotYourDecisionError,
    StateStoreUnavailableError,
    UnknownDecisionError,
    UnknownLessonError,
    UpstreamError,
)
from ..errors import (
    FeedbackRefusedError as FeedbackRefusedError,  # importable here as before
)
from ..gates.base.feedback import Feedback, FeedbackLog
from ..gates.base.gate import Gate
from ..models.chat.base import ChatModel, ChatOptions, Message, TokenUsage
from ..models.chat.stream import astream_chat
from ..models.chat.unavailable import is_timeout
from ..records.answer_metrics import normalize_answer
from ..records.decision import DRAFT
from ..retrieval.base import Hit, Retriever
from .conversation import read_turn
from .limits import Limits, check_conversation, token_counter
from .metrics import ServeMetrics
from .records import PENDING, TAUGHT, Lesson, LessonLog, ServedDecision, Tally
from .shadow import ServedShadowLearner
from .state import LocalState, StateStore

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Answer:
    """An answered request.

    Attributes:
        text: the answer the user gets.
        finish_reason: ``"stop"``, or ``"length"`` when the answer was cut at its token cap.
        record: the decision record (``adaptive_gates`` in a completion): the decision,
            the route, the passages used, where the time went and the running totals;
            its ``"id"`` is what feedback on the answer names.
        usage: what the answer cost in tokens.
        summary: the few fields of the decision a response header carries.
    """

    text: str
    finish_reason: str
    record: dict[str, Any]
    usage: TokenUsage
    summary: dict[str, Any]

    @property
    def decision_id(self) -> str:
        """The id feedback on this answer names."""
        return str(self.record["id"])


@dataclass
class _Prepared:
    """A request decided and ready to answer: the decision record, and what the
    upstream is asked (nothing when a draft is served)."""

    served: ServedDecision
    messages: list[Message]
    options: ChatOptions
    draft: str | None
    started: float  # perf_counter() when the request arrived
    usage: TokenUsage | None = None  # as the upstream reported it
    finish_reason: str = "stop"  # "length" when the answer was cut at its token cap


class AnswerStream:
    """An answer piece by piece (``ChatService.answer_stream``): an async iterator of
    text pieces. The first ``anext`` decides (and retrieves), so it raises what
    ``ChatService.answer`` raises; after it, ``decision_id`` and ``summary`` are set.
    Once the last piece was read, ``finish_reason``, ``record`` and ``usage`` are set and
    the answer is recorded. Closed early (``aclose``: a client that left), the upstream's
    generation stops and nothing is recorded; ``record`` stays ``None``.
    """

    def __init__(
        self,
        service: ChatService,
        messages: list[Message],
        options: ChatOptions,
        owner: str | None,
        *,
        streamed: bool = True,
    ) -> None:
        self.decision_id: str | None = None
        self.summary: dict[str, Any] | None = None
        self.finish_reason: str | None = None
        self.record: dict[str, Any] | None = None
        self.usage: TokenUsage | None = None
        self._pieces = self._run(service, messages, options, owner, streamed)

    def __aiter__(self) -> AnswerStream:
        return self

    async def __anext__(self) -> str:
        return await anext(self._pieces)

    async def aclose(self) -> None:
        """Stop the answer: the upstream's generation ends at its next token."""
        await self._pieces.aclose()

    async def _run(
        self, service: ChatService, messages: list[Message], options: ChatOptions, owner: str | None, streamed: bool
    ) -> AsyncGenerator[str, None]:
        prepared = await service._prepare(messages, options, owner)
        self.decision_id = prepared.served.id
        self.summary = prepared.served.summary()
        answer: list[str] = []
        async with contextlib.aclosing(service._stream(prepared)) as pieces:
            async for piece in pieces:
                answer.append(piece)
                yield piece
        text = "".join(answer)
        self.record = service._finish(prepared, stream=streamed, answer=text)
        self.usage = service._usage(prepared, text)
        self.finish_reason = prepared.finish_reason


class ChatService:
    """Answers chat requests, retrieving only when the gate says so.

    Args:
        gate: a fitted gate (its ``adecide`` judges each turn).
        retriever: the corpus' retriever (in-process faiss or a database's).
        upstream: the chat model that answers (an OpenAI-compatible server or the
            embedded model).
        k: passages retrieved when the gate says retrieve.
        history_window: earlier user questions a follow-up may lean on
            (``history_window.standalone_question``).
        instruction: the first line of the answer prompt.
        max_tokens: the answer length when a request sets none (at most
            ``limits.max_answer_tokens``, the most a request may ask).
        upstream_timeout: seconds to wait for the upstream's reply (or, streaming, for
            each next piece) before giving up with a timeout.
        after_feedback: called (in a worker thread) after feedback taught the gate, e.g.
            to save it.
        limits: the bounds on a request (``serve.limits``); the token bounds are
            counted in the upstream's tokens when it counts them (the embedded model).
        model_names: the model names ``/v1/models`` lists (with ``default``); default:
            the upstream's own. A request may name any model: each is an alias of the
            served one.
        shadow: learns the gate from the answered decisions (``serve.shadow``), after
            each answer and never in its way; ``None``: nothing is learnt that way.
        lesson_quorum: distinct clients (keys) whose agreeing verdicts on a question
            teach the gate (an admin's teaches at once); until then a verdict is pending.
        share_evidence: neighbours of the evidence that other keys taught through
            feedback keep their text (marked ``taught_by_another_key``); by default it
            is left out.
        lessons: the lesson log (``LessonLog.load`` reads one persisted beside the gate,
            to list and revert lessons after a restart); default: a new one in memory.
        state: where the decision book, the lessons, the feedback quota and the rate
            limit are kept (``serve.state``: ``RedisState`` shares them between
            servers); default: in this process (``LocalState`` over ``lessons``).
    """

    def __init__(
        self,
        gate: Gate,
        retriever: Retriever,
        upstream: ChatModel,
        *,
        k: int = 3,
        history_window: int = 2,
        instruction: str = DEFAULT_INSTRUCTION,
        max_tokens: int = 128,
        upstream_timeout: float = 60.0,
        after_feedback: Callable[[], object] | None = None,
        limits: Limits | None = None,
        model_names: Sequence[str] = (),
        shadow: ServedShadowLearner | None = None,
        lesson_quorum: int = 2,
        share_evidence: bool = False,
        lessons: LessonLog | None = None,
        state: StateStore | None = None,
    ) -> None:
        if k < 1 or history_window < 0 or max_tokens < 1 or not upstream_timeout > 0:
            raise ValueError("k and max_tokens must be >= 1, history_window >= 0 and upstream_timeout > 0")
        if lesson_quorum < 1:
            raise ValueError(f"lesson_quorum must be >= 1, got {lesson_quorum}")
        if state is not None and lessons is not None:
            raise ValueError("give the lessons or the state that holds them, not both")
        limits = limits or Limits()
        if max_tokens > limits.max_answer_tokens:
            raise ValueError(
                f"max_tokens ({max_tokens}) is more than limits.max_answer_tokens ({limits.max_answer_tokens})"
            )
        self.gate = gate
        self.retriever = retriever
        self.upstream = upstream
        self.k = k
        self.history_window = history_window
        self.instruction = instruction
        self.max_tokens = max_tokens
        self.upstream_timeout = upstream_timeout
        self.after_feedback = after_feedback
        self.limits = limits
        self.model_names = tuple(model_names) or (upstream.model_id,)
        self.shadow = shadow
        self._count_tokens = token_counter(upstream)
        self.metrics = ServeMetrics()
        self.state: StateStore = state if state is not None else LocalState(lessons)
        self.book = self.state.book
        self.lesson_quorum = lesson_quorum
        self.share_evidence = share_evidence
        self.lessons = self.state.lessons
        self._taught_questions: dict[str, frozenset[str | None]] | None = None
        self.tally = Tally()
        self._feedback_lock = asyncio.Lock()
        per_hour = self.limits.feedback_per_hour
        self._feedback_quota = None if per_hour is None else self.state.buckets("feedback", per_hour, 3600.0)

    @property
    def learns(self) -> bool:
        """Whether a verdict on an answer teaches the gate: it learns online, and, for a
        gate that learns from served pairs (a draft-check gate), a shadow learner refits
        it here (``--shadow-rate``; without one a verdict is logged and never learnt)."""
        from ..gates.shadow.learning import LearnsFromShadows

        if not getattr(self.gate, "learns_online", False):
            return False
        if isinstance(self.gate, LearnsFromShadows):
            return self.shadow is not None and not self.gate.logprob_features
        return True

    @property
    def model_id(self) -> str:
        """The upstream model's name, which completions report."""
        return self.upstream.model_id

    # ------------------------------------------------------------------ answering
    async def answer(self, messages: list[Message], options: ChatOptions, owner: str | None = None) -> Answer:
        """Answer the conversation: the gate judges its last user turn, the passages are
        retrieved if it says so, and the upstream answers (or the gate's draft is
        served); the answer is recorded under its decision's id. ``owner`` (the asking
        key's id) alone may judge the answer, besides an admin. Cancelled (a client that
        left), the generation stops and nothing is recorded.

        Raises:
            ConversationTooLongError: a message or the conversation is past the limits,
                or the prompt, passages added, is past the upstream's window.
            ValueError: the conversation does not end with a user message with text.
            GateBackendError: the gate's backend cannot serve it at all.
            UpstreamError: the upstream failed, or sent nothing for ``upstream_timeout``.
        """
        stream = AnswerStream(self, messages, options, owner, streamed=False)
        async with contextlib.aclosing(stream):
            text = "".join([piece async for piece in stream])
        assert stream.record is not None and stream.usage is not None and stream.summary is not None
        return Answer(text, stream.finish_reason or "stop", stream.record, stream.usage, stream.summary)

    def answer_stream(self, messages: list[Message], options: ChatOptions, owner: str | None = None) -> AnswerStream:
        """``answer`` piece by piece as the upstream makes it (a draft as one piece); its
        first ``anext`` raises what ``answer`` raises before any piece, a later one an
        ``UpstreamError`` when the upstream fails midway (nothing is then recorded)."""
        return AnswerStream(self, messages, options, owner)

    async def _prepare(self, messages: list[Message], options: ChatOptions, owner: str | None) -> _Prepared:
        """Decide on the conversation's last user turn and retrieve if the gate says so."""
        started = time.perf_counter()
        check_conversation(messages, self.limits, self._count_tokens)
        turn = read_turn(messages, self.history_window)
        try:
            decision = await self.gate.adecide(turn.judged)
        except BackendMisconfiguredError as exc:  # raised, not a fallback: no question would fare better
            raise GateBackendError(f"the gate's backend cannot serve it: {exc}") from exc
        passages: list[Hit] = []
        retrieval_ms = 0.0
        if decision.retrieve and decision.passages is not None:
            passages = list(decision.passages)  # the gate retrieved to decide: no second retrieval
        elif decision.retrieve:
            passages, retrieval_ms = await self._retrieve(turn.judged)
        draft = decision.draft_answer if decision.route == DRAFT else None
        served = ServedDecision.new(decision, passages, owner)
        served.latency_ms["retrieval"] = retrieval_ms
        prompt = build_prompt(turn.question, [h.as_passage() for h in passages], self.instruction)
        upstream_messages = [*turn.earlier, {"role": "user", "content": prompt}]
        return _Prepared(served, upstream_messages, {"max_tokens": self.max_tokens, **options}, draft, started)

    async def _retrieve(self, query: str) -> tuple[list[Hit], float]:
        """The top passages and the milliseconds it took; none when the retriever fails
        (the answer goes on without them, and the failure is logged)."""
        started = time.perf_counter()
        try:
            hits = await asyncio.to_thread(self.retriever.search, query, self.k)
        except Exception:  # a failing retriever must not fail the answer
            logger.exception("retrieval failed; answering without passages")
            hits = []
        return hits, (time.perf_counter() - started) * 1000

    async def _stream(self, prepared: _Prepared) -> AsyncGenerator[str, None]:
        """The answer piece by piece as the upstream makes it (a draft as one piece); a
        prompt past the upstream's window raises ``ConversationTooLongError``, a failing
        or silent upstream ``UpstreamError``."""
        if prepared.draft is not None:
            yield prepared.draft
            return
        started = time.perf_counter()
        pieces = astream_chat(self.upstream, prepared.messages, **prepared.options)
        try:
            while True:
                try:
                    async with asyncio.timeout(self.upstream_timeout):
                        piece = await anext(pieces)
                except StopAsyncIteration:
                    return
                except ContextLengthExceededError as exc:
                    raise _too_long(exc) from exc
                except Exception as exc:
                    raise self._upstream_error(exc) from exc
                if piece.reply is not None:
                    prepared.usage = piece.reply.usage
                    prepared.finish_reason = "length" if piece.reply.finish_reason == "length" else "stop"
                if piece.text:
                    yield piece.text
        finally:
            prepared.served.latency_ms["upstream"] = (time.perf_counter() - started) * 1000
            with contextlib.suppress(Exception):  # closing a failed stream may fail again
                await pieces.aclose()

    def _upstream_error(self, exc: BaseException) -> UpstreamError:
        timed_out = is_timeout(exc)
        self.metrics.upstream_errors.labels("timeout" if timed_out else "error").inc()
        # The client reads what failed, never where: the upstream's address (in the
        # exception's text) goes to the server's log only.
        if timed_out:
            message = f"the upstream LLM {self.model_id!r} gave no answer within {self.upstream_timeout:g} s"
        else:
            message = f"the upstream LLM {self.model_id!r} failed; the server's log says why"
        where = getattr(self.upstream, "base_url", None) or "in this process"
        logger.warning("the upstream LLM %r (%s) failed: %s: %s", self.model_id, where, type(exc).__name__, exc)
        return UpstreamError(message, timed_out=timed_out)

    def _usage(self, prepared: _Prepared, answer: str) -> TokenUsage:
        """What the answer cost in tokens: as the upstream reported it, else counted in
        the upstream's tokens (``limits.token_counter``) over the messages it was (or, for
        a served draft, would have been) asked and the answer."""
        if prepared.usage is not None:
            return prepared.usage
        prompt = sum(self._count_tokens(m["content"]) for m in prepared.messages)
        return TokenUsage(prompt, self._count_tokens(answer))

    def _finish(self, prepared: _Prepared, *, stream: bool, answer: str | None = None) -> dict[str, Any]:
        """Record an answered request (``answer``: what the user got, for shadow
        learning to read once it is sent); return its decision record."""
        served = prepared.served
        seconds = time.perf_counter() - prepared.started
        served.latency_ms.setdefault("upstream", 0.0)
        served.latency_ms["total"] = seconds * 1000
        stats = self.tally.count(served)
        self.metrics.answered(served, stats["retrieval_rate"], seconds, stream)
        try:
            self.book.put(served)
        except StateStoreUnavailableError:  # the answer goes on; it just cannot be judged later
            logger.warning("decision %s is not kept: the state store is unreachable, so it cannot be judged", served.id)
        if self.shadow is not None:
            self.shadow.observe(served, answer)  # in the background; never raises
        return served.to_dict(stats)

    # ------------------------------------------------------------------ feedback and state
    async def feedback(
        self, decision_id: str, correct: bool, client: str | None = None, *, admin: bool = False
    ) -> dict[str, Any]:
        """Judge decision ``decision_id``'s answer: correct or not, on behalf of ``client``
        (the judging key's id, or an address on a server without keys; ``None``: the
        program holding the service, trusted as an admin is). The verdict teaches the
        gate once verdicts agreeing with it (on the same question, route and verdict)
        come from ``lesson_quorum`` distinct clients, or one of them from an ``admin``;
        until then it is listed as pending (and counts towards the quorum of later
        ones). The answer is judged either way.

        Raises:
            UnknownDecisionError: no such decision is held (never taken, or too old).
            NotYourDecisionError: another key got the answer, and ``admin`` is not set.
            FeedbackQuotaError: ``client`` gave as many verdicts as the limits allow.
            AlreadyJudgedError: the answer has its verdict.
            StateStoreUnavailableError: the store shared by the servers cannot be
                reached; the verdict is not taken.
            MemoryUnavailableError: the database holding the gate's memory cannot be
                reached; the verdict is not taken.
            FeedbackNotSupportedError: the gate does not learn from feedback.
        """
        served = self.book.get(decision_id)
        if served is None:
            raise UnknownDecisionError(decision_id)
        if served.owner is not None and served.owner != client and not admin:
            raise NotYourDecisionError("only the API key that got this answer, or an admin key, may judge it")
        if served.verdict is not None:
            raise AlreadyJudgedError(f"decision {decision_id!r} has its verdict; a second changes nothing")
        if not self.gate.learns_online:
            self.gate.record_decision_feedback(served.decision, correct)  # raises, saying why
        wait = 0 if self._feedback_quota is None else self._feedback_quota.take(client or "anonymous")
        if wait:
            per_hour = self.limits.feedback_per_hour
            raise FeedbackQuotaError(f"more than {per_hour} verdicts an hour; retry in {wait} s", wait)
        # One at a time: the gate's memory learns safely while others decide, a save after
        # each lesson must not interleave with the next, and two verdicts on one answer
        # sent together find the first one's mark.
        async with self._feedback_lock:
            # the verdict is given first (atomically: another server may be judging the
            # same answer), and taken back when the lesson cannot be taken
            if not self.book.judge(decision_id, correct):
                if self.book.get(decision_id) is None:
                    raise UnknownDecisionError(decision_id)
                raise AlreadyJudgedError(f"decision {decision_id!r} has its verdict; a second changes nothing")
            try:
                return await self._judged(served, correct, client, admin)
            except (MemoryUnavailableError, StateStoreUnavailableError, FeedbackNotSupportedError, ValueError):
                # not taught: the answer is not judged, and may be judged again
                with contextlib.suppress(StateStoreUnavailableError):
                    self.book.judge(decision_id, None)
                raise

    async def _judged(self, served: ServedDecision, correct: bool, client: str | None, admin: bool) -> dict[str, Any]:
        """``feedback`` once the answer has its verdict (under the feedback lock)."""
        decision_id = served.id
        decision = served.decision
        admin = admin or client is None
        lesson = Lesson(
            decision_id,
            decision.question,
            served.route,
            decision.retrieve,
            correct,
            None,
            client,
            time.time(),
            admin=admin,
            status=PENDING,
            decision=decision,
        )
        agreeing = self._agreeing(lesson)
        if not self._has_quorum([*agreeing, lesson]):
            self.lessons.add(lesson)
            keys = len({x.judged_by for x in agreeing} | {client})
            self.metrics.feedback.labels("true" if correct else "false").inc()
            logger.info("verdict on decision %s pending: %d of %d keys", decision_id, keys, self.lesson_quorum)
            return {
                "decision_id": decision_id,
                "route": served.route,
                "status": PENDING,
                "label": None,
                "quorum": {"keys": keys, "needed": self.lesson_quorum},
                "memory": self.memory_counts(),
            }
        # the verdict and every pending one agreeing with it teach the gate, oldest first
        pending = [x for x in agreeing if x.status == PENDING]
        taught = await self._teach(lesson)  # the new one first: a failure takes nothing
        self.lessons.add(taught)
        labelled = taught.label is not None
        for earlier in pending:
            with contextlib.suppress(MemoryUnavailableError):  # stays pending: taught with the next
                now = await self._teach(earlier)
                self.lessons.update(now.decision_id, status=TAUGHT, label=now.label, entry=now.entry)
                labelled = labelled or now.label is not None
        self._taught_questions = None
        if self.after_feedback is not None and labelled:
            await asyncio.to_thread(self.after_feedback)
        self.metrics.feedback.labels("true" if correct else "false").inc()
        return {
            "decision_id": decision_id,
            "route": served.route,
            "status": TAUGHT,
            "label": taught.label,
            "memory": self.memory_counts(),
        }

    def _agreeing(self, lesson: Lesson) -> list[Lesson]:
        """The standing lessons (pending or taught, not taken back) that agree with ``lesson``."""
        agreement = lesson.agreement
        if agreement is None:
            return []
        return [x for x in self.lessons.all() if x.reverted_at is None and x.agreement == agreement]

    def _has_quorum(self, agreeing: list[Lesson]) -> bool:
        """Whether agreeing verdicts are enough to teach: from ``lesson_quorum`` distinct
        clients, or one from an admin."""
        return any(x.admin for x in agreeing) or len({x.judged_by for x in agreeing}) >= self.lesson_quorum

    async def _teach(self, lesson: Lesson) -> Lesson:
        """Teach the gate ``lesson``'s verdict; the lesson as taught (with its label)."""
        try:
            if lesson.decision is not None:
                entry = await asyncio.to_thread(self.gate.record_decision_feedback, lesson.decision, lesson.correct)
            else:  # restored after a restart: the gate reads the question again
                assert lesson.question is not None  # a lesson without one is never pending
                entry = await asyncio.to_thread(
                    self.gate.record_feedback, lesson.question, lesson.retrieved, lesson.correct
                )
        except BackendUnavailableError as exc:
            raise MemoryUnavailableError(
                "the gate's memory cannot be reached now; send the verdict again later"
            ) from exc
        label = None if entry.label is None else ("unknown" if entry.label else "known")
        return replace(lesson, status=TAUGHT, label=label, entry=entry)

    async def revert(self, decision_id: str) -> dict[str, Any]:
        """Take back the lesson given on ``decision_id``'s answer: the gate withdraws what it
        learnt from it (saved as feedback is), a pending one never counts towards a
        quorum, and the lessons list marks it reverted. The answer keeps its verdict: it
        is not judged again. Lessons persisted beside the gate are reverted after a
        restart too.

        Raises:
            UnknownLessonError: no lesson on that answer is listed (never given, or past
                the log's capacity).
            AlreadyRevertedError: it was taken back already.
            MemoryUnavailableError: the database holding the gate's memory cannot be reached.
            FeedbackNotSupportedError: the gate's memory cannot take a question back.
        """
        async with self._feedback_lock:
            lesson = self.lessons.find(decision_id)
            if lesson is None:
                raise UnknownLessonError(decision_id)
            if lesson.reverted_at is not None:
                raise AlreadyRevertedError(f"the lesson on decision {decision_id!r} was taken back already")
            if lesson.status == TAUGHT and lesson.entry is not None:
                try:
                    await asyncio.to_thread(self._withdraw, lesson.entry)
                except BackendUnavailableError as exc:
                    raise MemoryUnavailableError("the gate's memory cannot be reached now; revert again later") from exc
                except ValueError:  # the gate holds it no more (saved before it was taught)
                    logger.warning("the gate held no lesson on decision %s to take back", decision_id)
            reverted = self.lessons.mark_reverted(decision_id, time.time())
            self._taught_questions = None
            if self.after_feedback is not None and lesson.entry is not None and lesson.entry.label is not None:
                await asyncio.to_thread(self.after_feedback)
        logger.info("lesson on decision %s taken back", decision_id)
        return {"lesson": None if reverted is None else reverted.to_dict(), "memory": self.memory_counts()}

    def _withdraw(self, entry: Feedback) -> None:
        """The gate withdraws ``entry``. With a shared state, another server may have
        taught it, into the memory they share: this gate's log then takes the entry
        first, so that what it taught leaves the shared memory."""
        try:
            self.gate.withdraw_feedback(entry)
        except ValueError:
            log = getattr(self.gate, "feedback_", None) if self.state.shared else None
            if not isinstance(log, FeedbackLog):
                raise
            log.append(entry)
            self.gate.withdraw_feedback(entry)

    # ------------------------------------------------------------------ evidence
    def visible_record(self, record: dict[str, Any], viewer: str | None, *, admin: bool = False) -> dict[str, Any]:
        """``record`` as ``viewer`` (the asking key's id) may see it: a neighbour of the
        evidence that is a question taught through feedback by others (another key, or
        feedback the server holds no key for) is marked ``taught_by_another_key``, and its
        text is left out (``question`` null) unless ``share_evidence`` is set. Questions
        the gate was fitted on stay as they are; an admin (or anyone on a server without
        keys, where every route is open) sees the record whole."""
        if admin:
            return record
        taught = self._taught()
        if not taught:
            return record

        def hidden(question: object) -> bool:
            if not isinstance(question, str):
                return False
            judges = taught.get(normalize_answer(question))
            return judges is not None and viewer not in judges

        return _redacted(record, hidden, self.share_evidence)

    def _taught(self) -> dict[str, frozenset[str | None]]:
        """The questions taught through feedback (as feedback reads them) and the clients
        whose verdicts taught each; those in the gate's log with no lesson kept have none."""
        taught = self._taught_questions
        if taught is None:
            judges: dict[str, set[str | None]] = {}
            try:
                lessons = self.lessons.all()
            except StateStoreUnavailableError:  # the gate's own log still hides what it holds
                lessons = []
            try:
                log = getattr(self.gate, "feedback_", None)
            except Exception:  # a gate not fitted, or holding no log
                log = None
            entries = log.entries() if isinstance(log, FeedbackLog) else []
            for entry in entries:
                if entry.label is not None:
                    judges.setdefault(normalize_answer(entry.question), set())
            for lesson in lessons:
                if lesson.status == TAUGHT and lesson.reverted_at is None and lesson.label is not None:
                    assert lesson.question is not None
                    judges.setdefault(normalize_answer(lesson.question), set()).add(lesson.judged_by)
            taught = {q: frozenset(who) for q, who in judges.items()}
            if not self.state.shared:  # other servers change shared lessons: read them each time
                self._taught_questions = taught
        return taught

    def memory_counts(self) -> dict[str, int] | None:
        """The known and unknown questions in the gate's memory (``None``: it has none,
        or the database holding it cannot be reached now)."""
        memory = getattr(self.gate, "memory_", None)
        if memory is None:
            return None
        try:
            known, unknown = memory.counts
        except BackendUnavailableError:
            return None
        return {"known": int(known), "unknown": int(unknown)}

    def stats(self) -> dict[str, Any]:
        """The gate, its threshold, the running totals and the memory's size; for a gate
        that compares its drafts with its training drafts (a draft-check gate's
        ``draft_drift_``), that comparison as ``draft_drift``."""
        stats = {
            "gate": self.gate.name,
            "threshold": self.gate.threshold_,
            "model": self.model_id,
            "stats": self.tally.snapshot(),
            "memory": self.memory_counts(),
            "shadow": None if self.shadow is None else self.shadow.stats(),
        }
        drift = getattr(self.gate, "draft_drift_", None)
        if drift is not None:
            stats["draft_drift"] = drift.to_dict()
        return stats


def _redacted(value: Any, hidden: Callable[[object], bool], share: bool) -> Any:
    """``value`` (a record's JSON) with every neighbour ``hidden`` says is another's
    taught question marked, and its text left out unless ``share``."""
    if isinstance(value, list):
        return [_redacted(item, hidden, share) for item in value]
    if not isinstance(value, dict):
        return value
    out = {}
    for name, item in value.items():
        if name == "neighbours" and isinstance(item, list):
            out[name] = [_neighbour(n, hidden, share) for n in item]
        else:
            out[name] = _redacted(item, hidden, share)
    return out


def _neighbour(neighbour: Any, hidden: Callable[[object], bool], share: bool) -> Any:
    if not isinstance(neighbour, dict) or not hidden(neighbour.get("question")):
        return neighbour
    return {**neighbour, "question": neighbour["question"] if share else None, "taught_by_another_key": True}


def _too_long(exc: ContextLengthExceededError) -> ConversationTooLongError:
    return ConversationTooLongError(f"with the passages it was given, the prompt is too long: {exc}")
