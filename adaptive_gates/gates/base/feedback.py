"""Feedback from answered questions: what a gate decided, and whether the answer was right.

A gate that learns online has ``learns_online`` true and implements
``record_feedback(question, retrieved, correct)``; every other gate raises
``FeedbackNotSupportedError`` there. The SKR gates turn feedback into self-knowledge
labels (``feedback_label``) and add them to their memory (``LearnsFromFeedback``
holds what every such gate shares); every observation is also
kept in a ``FeedbackLog`` saved with the gate, so a gate that must be refitted (a
combiner over other gates) can learn from the whole history later.

One observation shows one of the two answers SKR's labelling compares (SPEC §1.1,
``label_outcomes``: known iff correct-without >= correct-with, both wrong dropped).
The rule for each case, with a = correct without retrieval and b = with it:

- not retrieved, correct (a = 1): a >= b whatever b is, so **KNOWN**; exact.
- not retrieved, wrong (a = 0): UNKNOWN if b = 1, dropped if b = 0; never KNOWN. It is
  labelled **UNKNOWN** (the closed-book answer failed; only retrieval can help), unless
  the log already holds a wrong answer *with* retrieval to the same question: both
  wrong, **dropped**, as ``label_outcomes`` drops it.
- retrieved, correct or wrong (b known, a not): either label is possible (retrieved
  and wrong is KNOWN if a = 1, dropped if a = 0; retrieved and right is KNOWN or
  UNKNOWN), so **no label**: the observation is only logged. A retrieved wrong answer
  still counts in the both-wrong check above.

A question's latest label is its *verdict* (``FeedbackLog.verdict``): it outweighs every
earlier label of that question, its training label included, so the memory never holds
a question under both labels at once; an observation without a label leaves the
verdict as it was (it is never withdrawn).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, TypeVar

import numpy as np

from ...errors import FeedbackNotSupportedError as FeedbackNotSupportedError  # its former home
from ...errors import GateLoadError
from ...persistence import strict_json
from ...persistence.json_lines import dumps_line, split_lines
from ...records.answer_metrics import normalize_answer
from ...records.selfknowledge import KNOWN, UNKNOWN
from ...records.validation import check_question

_T = TypeVar("_T")

logger = logging.getLogger(__name__)

#: The file a saved gate keeps its feedback log in.
FEEDBACK_FILE = "feedback.jsonl"


@dataclass(frozen=True)
class Feedback:
    """One observation: the question, whether it was answered with retrieval, whether
    the answer was correct, and the self-knowledge label it gave (``None``: none)."""

    question: str
    retrieved: bool
    correct: bool
    label: int | None = None


def check_feedback(retrieved: object, correct: object) -> tuple[bool, bool]:
    """``retrieved`` and ``correct`` as bools, or a ``TypeError`` naming the bad one."""
    out = []
    for name, value in (("retrieved", retrieved), ("correct", correct)):
        if type(value).__name__ not in ("bool", "bool_"):  # Python's or numpy's bool
            raise TypeError(f"feedback: {name} must be a bool, got {type(value).__name__} {value!r}")
        out.append(bool(value))
    return out[0], out[1]


def feedback_label(retrieved: bool, correct: bool, wrong_with_retrieval: bool = False) -> int | None:
    """The self-knowledge label one observation gives (see the module's rule);
    ``wrong_with_retrieval``: the question was already answered wrongly with retrieval."""
    if retrieved:
        return None
    if correct:
        return KNOWN
    return None if wrong_with_retrieval else UNKNOWN


class FeedbackLog:
    """Every feedback observation of a gate, in order; safe to append from many threads.

    Saved with the gate as JSON lines (``feedback.jsonl``), one observation a line; the
    verdicts are read back from it.
    """

    def __init__(self, entries: list[Feedback] | None = None) -> None:
        self._entries: list[Feedback] = list(entries or [])
        self._derive()
        self._lock = threading.Lock()

    def _derive(self) -> None:
        """The verdicts and the questions answered wrongly with retrieval, from the entries."""
        self._wrong_with_retrieval = {_key(e.question) for e in self._entries if e.retrieved and not e.correct}
        # Replaced, never changed in place, so a reader needs no lock.
        self._verdicts: dict[str, int] = {_key(e.question): e.label for e in self._entries if e.label is not None}

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Feedback]:
        """A copy of the observations, oldest first."""
        with self._lock:
            return list(self._entries)

    def observe(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """The observation with the label ``feedback_label`` gives it in the light of
        the logged ones (not logged yet: ``append`` it once it is learned from)."""
        with self._lock:
            wrong_before = _key(question) in self._wrong_with_retrieval
        return Feedback(question, retrieved, correct, feedback_label(retrieved, correct, wrong_before))

    def append(self, entry: Feedback) -> None:
        """Log one observation; its label, if any, becomes the question's verdict."""
        with self._lock:
            self._entries.append(entry)
            if entry.retrieved and not entry.correct:
                self._wrong_with_retrieval.add(_key(entry.question))
            if entry.label is not None:
                self._verdicts = {**self._verdicts, _key(entry.question): entry.label}

    def withdraw(self, entry: Feedback) -> None:
        """Take ``entry`` out of the log, as if it had never been given: the question's
        verdict becomes the latest label left (or none). The entry is found as the very
        object ``observe`` made; failing that (a copy), the latest equal one. Labels that
        later observations were given in its light are kept as they were.

        Raises:
            ValueError: the log holds no such entry.
        """
        with self._lock:
            del self._entries[self._position(entry)]
            self._derive()

    def check_holds(self, entry: Feedback) -> None:
        """A ``ValueError`` unless ``withdraw(entry)`` would find it."""
        with self._lock:
            self._position(entry)

    def _position(self, entry: Feedback) -> int:
        found = next((i for i, e in enumerate(self._entries) if e is entry), None)
        if found is None:
            found = next((i for i in reversed(range(len(self._entries))) if self._entries[i] == entry), None)
        if found is None:
            raise ValueError(f"the feedback log holds no entry {entry!r}")
        return found

    def verdict(self, question: str) -> int | None:
        """The latest label feedback gave ``question`` (or a wording of it differing
        only in case, punctuation or articles); ``None`` if none did."""
        return self._verdicts.get(_key(question))

    def relabel(self, labels: np.ndarray, questions: Sequence[str]) -> np.ndarray:
        """``labels`` (one per question) of ``questions`` (stored ones, e.g. a memory's)
        with each judged question's verdict in place of its stored label."""
        verdicts = self._verdicts
        if not verdicts:
            return labels
        judged = [verdicts.get(_key(q), label) for q, label in zip(questions, labels.tolist())]
        return np.asarray(judged, dtype=labels.dtype)

    def save(self, directory: Path) -> dict[str, Any]:
        """Write ``feedback.jsonl`` into ``directory``; return its JSON state."""
        entries = self.entries()
        lines = "".join(dumps_line(asdict(e)) for e in entries)
        (directory / FEEDBACK_FILE).write_text(lines, encoding="utf-8")
        return {"file": FEEDBACK_FILE, "size": len(entries)}

    @classmethod
    def load(cls, directory: Path, state: dict[str, Any] | None) -> FeedbackLog:
        """The log ``save`` wrote (an empty one for a gate saved without a log)."""
        if state is None:
            return cls()
        if not isinstance(state, dict) or state.get("file") != FEEDBACK_FILE or not isinstance(state.get("size"), int):
            raise GateLoadError(f"{directory}: field 'state.feedback' is malformed: {state!r}")
        path = directory / FEEDBACK_FILE
        try:
            lines = split_lines(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise GateLoadError(f"{directory}: file {FEEDBACK_FILE!r} is unreadable ({exc})") from None
        entries = [_entry(directory, n, line) for n, line in enumerate(lines, 1) if line]
        if len(entries) != state["size"]:
            raise GateLoadError(
                f"{directory}: file {FEEDBACK_FILE!r} holds {len(entries)} observations, "
                f"field 'state.feedback.size' says {state['size']}"
            )
        return cls(entries)


def _key(question: str) -> str:
    """Questions that differ only in case, punctuation or articles are the same one."""
    return normalize_answer(question)


def _entry(directory: Path, line_number: int, line: str) -> Feedback:
    where = f"{directory}: file {FEEDBACK_FILE!r}, line {line_number}"
    try:
        obj = strict_json.loads(line)
    except ValueError as exc:
        raise GateLoadError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(obj, dict) or set(obj) != {"question", "retrieved", "correct", "label"}:
        raise GateLoadError(f"{where}: expected the fields question, retrieved, correct, label")
    if (
        not isinstance(obj["question"], str)
        or not isinstance(obj["retrieved"], bool)
        or not isinstance(obj["correct"], bool)
        or obj["label"] not in (None, KNOWN, UNKNOWN)
        or isinstance(obj["label"], bool)
    ):
        raise GateLoadError(f"{where}: a field has the wrong type or value")
    return Feedback(obj["question"], obj["retrieved"], obj["correct"], obj["label"])


class LearnsFromFeedback:
    """Mixin for a ``Gate`` that learns online; list it before ``Gate`` in the bases.

    The gate keeps ``self._feedback`` (a ``FeedbackLog``, started empty by ``fit``).
    One lesson learnt or taken back is one step under ``_lesson_lock``: the check that
    the log holds it, the change to the memory and the change to the log, so two
    threads withdrawing the same lesson take one copy, never a training row too; a
    gate's ``_save_state`` takes the same lock, so a save holds a lesson whole or not at all."""

    _feedback: FeedbackLog | None

    if TYPE_CHECKING:  # what the Gate it mixes into provides
        name: ClassVar[str]

        def _check_fitted(self) -> None: ...

        def _fitted_value(self, value: _T | None) -> _T: ...

    @property
    def learns_online(self) -> bool:
        return True

    def _lesson_lock(self) -> threading.RLock:
        """The lock one lesson's learning, its withdrawal and a save share (made at
        first use, so a gate built by any constructor has one)."""
        lock = self.__dict__.get("_lessons_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_lessons_lock", threading.RLock())
        return lock

    @property
    def feedback_(self) -> FeedbackLog:
        """Every feedback observation since the gate was fitted (fitted state)."""
        self._check_fitted()
        return self._fitted_value(self._feedback)

    def record_feedback(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """Learn from one answered question. Returns the logged observation with the
        self-knowledge label the feedback rule gives it (see ``adaptive_gates.gates.base.feedback``)."""
        self._check_fitted()
        clean = check_question(question)
        retrieved, correct = check_feedback(retrieved, correct)
        with self._lesson_lock():  # labelled in the light of the log as it is when learnt
            entry = self.feedback_.observe(clean, retrieved, correct)
            self._learn(entry)
        logger.debug("%s feedback: %s", self.name, entry)
        return entry

    def _learn(self, entry: Feedback) -> None:
        """Learn from one observation as it arrives and log it (``feedback_.append``);
        a gate that learns at once overrides this, logging when it holds what it learnt."""
        self.feedback_.append(entry)

    def withdraw_feedback(self, entry: Feedback) -> None:
        """Undo one observation ``record_feedback`` returned (a verdict given in error,
        or to poison the gate): it leaves the log, and what the gate learnt from it goes
        with it (see ``FeedbackLog.withdraw`` for which entry is taken).

        Raises:
            ValueError: the gate's log holds no such entry.
            FeedbackNotSupportedError: the gate cannot take back what it learnt (its
                memory cannot remove a question).
        """
        self._check_fitted()
        if not isinstance(entry, Feedback):
            raise TypeError(f"expected the Feedback record_feedback returned, got {type(entry).__name__}")
        with self._lesson_lock():  # the check that the log holds it, the removal and the log's change as one
            self._unlearn(entry)
        logger.info("%s feedback withdrawn: %s", self.name, entry)

    def _unlearn(self, entry: Feedback) -> None:
        """Take back what ``_learn`` learnt from ``entry``; a gate that learns at once
        overrides this."""
        self.feedback_.withdraw(entry)
