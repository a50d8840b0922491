"""A draft-check gate that learns its LLM in production, from the pairs its decisions
already hold (docs/shadow_learning.md).

A draft-check decision that retrieves holds two answers to one question: the draft
(without retrieval) and the answer over the passages it checked the draft against.
That pair is an agreement outcome (``selfknowledge.agreement_records``): retrieval
"helps" where the answer over the passages differs from the draft. A decision that
does not retrieve holds the draft and the passages only; answering over them as well
(a *shadow* answer, one extra LLM call, never served) completes its pair.

What the gate learns from (``Observation``), with the chance it was observed:

- ``"retrieved"``: the pair of a decision that retrieved, observed with probability 1;
- ``"shadow"``: the pair of a decision that did not, observed with the shadow rate R;
- ``"verdict"``: a person's verdict on a served answer (``record_decision_feedback``),
  labelled by the feedback rule (``adaptive_gates.gates.base.feedback``): a right draft says
  retrieval was not needed, a wrong one that it was; a verdict on an answer made with
  retrieval gives no label and teaches nothing.

Weighting. The gate decides which questions show their pair: the ones it retrieves on
show it always, the others only in a share R of cases. Learning from the pairs as
they come would learn mostly from the questions the gate already sends to retrieval
(about 85 % of them at the shipped gate's threshold), the region it is least wrong
about. Each pair is therefore weighted by the inverse of the chance it was observed
(1 for a retrieved question, 1/R for a shadow), so the weighted pairs stand for every
question the gate saw, each counted once. With R = 0 the questions the gate answers
directly are never seen and no weight makes up for them: a learner then learns from
the gate's own choice of questions only (``benchmarks/shadow_stream.py`` measures
what that does).

Priority. A question's latest labelled verdict is its outcome: its agreement pairs
are left out of a refit (a person who judged the answer knows better than the
agreement of two answers of one model). Verdict rows count 1 each.

Refit. ``refit`` fits the combiner's models again on the ``"helps"`` target
(agreement makes correctness with retrieval constant, so the two-headed ``"gain"``
target has nothing to learn from it): on the rows the gate was fitted on (``FitRows``,
kept by the fit, each weighing 1, graded by agreement as the pairs are) and the
observations, weighted; the embedding's projection, the
standardisation and the blend's reference scores stay those of the fit's rows
(``combiner.refit_feature_combiner``). A gate that keeps no fit rows (the shipped one)
refits on the observations alone, once at least ``MIN_ROWS`` of them teach and both
labels occur. The default threshold is set again by the fit's rule
(``combiner.default_threshold``) on the reference rows.

Undoing. ``withdraw_observation`` takes one observation back (a pair from a broken
upstream answer, a mistaken verdict): it leaves the log and, if the combiner had
learnt from it, the combiner is refitted without it (back to the fitted combiner
when nothing is left to learn from, as the fit's rows alone refit to exactly what
the fit made, up to the target).

Saved with the gate as JSON lines and ``.npy`` arrays: ``shadow.jsonl`` (one
observation a line), ``shadow_features.npy`` and ``shadow_embeddings.npy`` (their
combiner rows), and the fit's rows as ``fit_rows_*.npy``. Never a pickle.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal, TypeGuard

import numpy as np

from ...errors import GateLoadError
from ...persistence import strict_json
from ...persistence.json_lines import dumps_line, split_lines
from ...persistence.saved_format import load_array, save_array
from ...records.answer_metrics import get_metric, normalize_answer
from ...records.data import OutcomeRecord
from ...records.selfknowledge import KNOWN, UNKNOWN
from ..base.feedback import Feedback, feedback_label
from ..combiner.features import FeatureCombiner, default_threshold, refit_feature_combiner
from ..combiner.logistic import Target

logger = logging.getLogger(__name__)

Source = Literal["retrieved", "shadow", "verdict"]
SOURCES: tuple[Source, ...] = ("retrieved", "shadow", "verdict")
#: The fewest observations a gate without fit rows refits on (a draft-check fit's floor).
MIN_ROWS = 10
#: What a refit learns: agreement gives no correctness with retrieval to learn.
TARGET: Target = "helps"
LOG_FILE = "shadow.jsonl"
_FIELDS = {"question", "draft", "answer", "source", "probability", "helps", "retrieved", "correct"}


@dataclass(frozen=True)
class Observation:
    """One thing the gate learns from: the question, the draft, the answer over the
    passages (``None`` for a verdict), where it came from (``source``), the chance it
    was observed (``probability``, in (0, 1]) and whether retrieval helps there
    (``helps``: 1 or 0; ``None``: it teaches nothing, e.g. a verdict on an answer made
    with retrieval). A verdict also keeps what was judged: the route (``retrieved``)
    and the verdict (``correct``)."""

    question: str
    draft: str
    answer: str | None
    source: Source
    probability: float
    helps: float | None
    retrieved: bool | None = None
    correct: bool | None = None

    @property
    def weight(self) -> float:
        """How much the observation counts in a refit: the inverse of the chance it was observed."""
        return 1.0 / self.probability

    def feedback(self) -> Feedback:
        """A verdict as the feedback entry the feedback API speaks of."""
        if self.source != "verdict" or self.retrieved is None or self.correct is None:
            raise ValueError("only a verdict is a feedback entry")
        label = None if self.helps is None else (UNKNOWN if self.helps else KNOWN)
        return Feedback(self.question, self.retrieved, self.correct, label)


def pair(
    question: str, draft: str, answer: str, source: Source, probability: float, metric: str = "contains"
) -> Observation:
    """The agreement outcome of one question's draft and its answer over the passages,
    graded as ``selfknowledge.agreement_records`` grades it: the answer over the
    passages is the reference, and retrieval helps where it scores higher than the
    draft (where the answers differ; an empty answer over the passages helps nowhere)."""
    if source not in ("retrieved", "shadow"):
        raise ValueError(f"a pair is observed as 'retrieved' or 'shadow', got {source!r}")
    _check_probability(probability)
    grade = get_metric(metric)
    a, b = grade(draft, [answer]), grade(answer, [answer])
    return Observation(question, draft, answer, source, float(probability), float(b > a))


def verdict(question: str, draft: str, retrieved: bool, correct: bool, wrong_with_retrieval: bool) -> Observation:
    """A person's verdict on a served answer, labelled by the feedback rule
    (``feedback.feedback_label``): a right draft is "retrieval does not help" (0), a
    wrong one "it helps" (1, unless the question was also answered wrongly with
    retrieval: both wrong, no label); an answer made with retrieval gives no label."""
    label = feedback_label(retrieved, correct, wrong_with_retrieval)
    helps = None if label is None else float(label == UNKNOWN)
    return Observation(question, draft, None, "verdict", 1.0, helps, retrieved, correct)


def _check_probability(probability: float) -> None:
    if isinstance(probability, bool) or not isinstance(probability, (int, float)) or not 0 < probability <= 1:
        raise ValueError(f"the chance an outcome was observed must be in (0, 1], got {probability!r}")


def same_question(question: str) -> str:
    """Questions that differ only in case, punctuation or articles are one question
    (as in the feedback log)."""
    return normalize_answer(question)


@dataclass(frozen=True)
class FitRows:
    """The rows a draft-check gate was fitted on, kept so that it can be refitted with
    what it observes: each row's combiner features, the question's embedding (``None``
    for a gate without one) and whether retrieval helps there *by agreement* (its
    recorded answer over the passages differs from its draft, ``agreement_helps``).

    Agreement, not the fit's gold outcomes: a refit learns one label from every row,
    and observations are graded by agreement (no gold answer is served). Measured on
    the bundled outcomes (``benchmarks/shadow_stream.py``), gold-labelled fit rows
    mixed with agreement-labelled pairs made the refitted gate retrieve for nearly
    every new question (agreement says "helps" far more often than gold does), and
    did worse than the static gate."""

    features: np.ndarray
    embeddings: np.ndarray | None
    helps: np.ndarray

    def __len__(self) -> int:
        return len(self.features)

    def save(self, directory: Path) -> dict[str, Any]:
        save_array(directory, "fit_rows_features.npy", self.features)
        save_array(directory, "fit_rows_helps.npy", self.helps)
        if self.embeddings is not None:  # float32: the encoder's own precision, half the bytes
            save_array(directory, "fit_rows_embeddings.npy", self.embeddings.astype(np.float32))
        return {"size": len(self), "embeddings": self.embeddings is not None}

    @classmethod
    def load(cls, directory: Path, state: Any, n_features: int, width: int | None) -> FitRows:
        """Rows saved by ``save`` with ``n_features`` columns and, if the gate embeds, ``width``-d vectors."""
        size = state.get("size") if isinstance(state, dict) else None
        if not isinstance(size, int) or isinstance(size, bool) or size < 1:
            raise GateLoadError(f"{directory}: field 'state.fit_rows.size' is missing or malformed")
        if state.get("embeddings") is not (width is not None):
            raise GateLoadError(f"{directory}: field 'state.fit_rows.embeddings' does not match the combiner")
        features = _finite(directory, "fit_rows_features.npy", (size, n_features))
        helps = _finite(directory, "fit_rows_helps.npy", (size,))
        if not np.all((helps == 0) | (helps == 1)):
            raise GateLoadError(f"{directory}: file 'fit_rows_helps.npy' must hold 0 or 1 per row")
        embeddings = None if width is None else _finite(directory, "fit_rows_embeddings.npy", (size, width))
        return cls(features, embeddings, helps)


def agreement_helps(records: Sequence[OutcomeRecord], metric: str = "contains") -> np.ndarray:
    """Whether retrieval helps on each outcome record by agreement (``pair``'s grading
    of its recorded draft and answer over the passages)."""
    graded = [pair(r.question, r.pred_no_retrieval, r.pred_one_retrieval, "retrieved", 1.0, metric) for r in records]
    return np.array([g.helps for g in graded], dtype=np.float64)


def _finite(directory: Path, name: str, shape: tuple[int, ...]) -> np.ndarray:
    array = load_array(directory, name, kinds="f")
    if array.shape != shape or not np.all(np.isfinite(array)):
        raise GateLoadError(f"{directory}: file {name!r} must hold {shape} finite floats, got {array.shape}")
    return array.astype(np.float64)


class ShadowLog:
    """Every observation of a gate, in order, with its combiner row (features and
    embedding); how many of them the combiner has learnt from (``learned``) and how
    many refits it took (``refits``). Safe to use from many threads."""

    def __init__(
        self,
        n_features: int,
        width: int | None,
        metric: str = "contains",
        entries: Sequence[Observation] = (),
        features: np.ndarray | None = None,
        embeddings: np.ndarray | None = None,
        learned: int = 0,
        refits: int = 0,
    ) -> None:
        self.n_features, self.width, self.metric = n_features, width, metric
        self._entries = list(entries)
        self._features = np.empty((0, n_features)) if features is None else np.asarray(features, dtype=np.float64)
        empty = None if width is None else np.empty((0, width))
        self._embeddings = empty if embeddings is None else np.asarray(embeddings, dtype=np.float64)
        self.learned, self.refits = learned, refits
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def entries(self) -> list[Observation]:
        """A copy of the observations, oldest first."""
        with self._lock:
            return list(self._entries)

    def rows(self) -> tuple[list[Observation], np.ndarray, np.ndarray | None]:
        """The observations with their feature rows and embeddings, as of now."""
        with self._lock:
            return (
                list(self._entries),
                self._features.copy(),
                None if self._embeddings is None else self._embeddings.copy(),
            )

    def append(self, entry: Observation, features: np.ndarray, embedding: np.ndarray | None) -> None:
        """Log one observation with its combiner row (``features``, and ``embedding`` if the gate embeds)."""
        row = np.asarray(features, dtype=np.float64).reshape(1, -1)
        if row.shape[1] != self.n_features:
            raise ValueError(f"expected {self.n_features} features, got {row.shape[1]}")
        if (embedding is None) != (self.width is None):
            raise ValueError("an embedding goes with every observation of a gate that embeds, and only then")
        with self._lock:
            self._entries.append(entry)
            self._features = np.vstack([self._features, row])
            if self._embeddings is not None and embedding is not None:
                self._embeddings = np.vstack([self._embeddings, np.asarray(embedding, dtype=np.float64).reshape(1, -1)])

    def position(self, entry: Observation) -> int:
        """Where ``entry`` is: the very object, else the latest equal one (``ValueError``: none)."""
        with self._lock:
            return _position(self._entries, entry)

    def remove(self, entry: Observation) -> bool:
        """Take ``entry`` out; whether the combiner had learnt from it (``ValueError``: no such entry)."""
        with self._lock:
            i = _position(self._entries, entry)
            del self._entries[i]
            self._features = np.delete(self._features, i, axis=0)
            if self._embeddings is not None:
                self._embeddings = np.delete(self._embeddings, i, axis=0)
            learnt = i < self.learned
            self.learned -= learnt
            return learnt

    def wrong_with_retrieval(self, question: str) -> bool:
        """Whether a verdict said an answer made with retrieval to ``question`` was wrong."""
        key = same_question(question)
        with self._lock:
            return any(
                e.source == "verdict" and e.retrieved and not e.correct and same_question(e.question) == key
                for e in self._entries
            )

    def save(self, directory: Path) -> dict[str, Any]:
        entries, features, embeddings = self.rows()
        lines = "".join(dumps_line(asdict(e)) for e in entries)
        (directory / LOG_FILE).write_text(lines, encoding="utf-8")
        save_array(directory, "shadow_features.npy", features)
        if embeddings is not None:
            save_array(directory, "shadow_embeddings.npy", embeddings.astype(np.float32))
        return {
            "file": LOG_FILE,
            "size": len(entries),
            "metric": self.metric,
            "learned": self.learned,
            "refits": self.refits,
        }

    @classmethod
    def load(cls, directory: Path, state: Any, n_features: int, width: int | None) -> ShadowLog:
        """The log ``save`` wrote, for a combiner of ``n_features`` columns and (if it embeds) ``width``-d vectors."""
        if not isinstance(state, dict) or state.get("file") != LOG_FILE:
            raise GateLoadError(f"{directory}: field 'state.shadow' is malformed: {state!r}")
        size, learned, refits, metric = (state.get(k) for k in ("size", "learned", "refits", "metric"))
        if not (_is_count(size) and _is_count(learned) and _is_count(refits)) or learned > size:
            raise GateLoadError(
                f"{directory}: fields 'state.shadow.size', 'learned', 'refits' must be counts, learned <= size"
            )
        if not isinstance(metric, str):
            raise GateLoadError(f"{directory}: field 'state.shadow.metric' must name a metric")
        try:
            lines = split_lines((directory / LOG_FILE).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError) as exc:
            raise GateLoadError(f"{directory}: file {LOG_FILE!r} is unreadable ({exc})") from None
        entries = [_observation(directory, n, line) for n, line in enumerate(lines, 1)]
        if len(entries) != size:
            raise GateLoadError(
                f"{directory}: file {LOG_FILE!r} holds {len(entries)} observations, "
                f"field 'state.shadow.size' says {size}"
            )
        features = _finite(directory, "shadow_features.npy", (size, n_features)) if size else None
        embeddings = None
        if width is not None and size:
            embeddings = _finite(directory, "shadow_embeddings.npy", (size, width))
        return cls(n_features, width, metric, entries, features, embeddings, learned, refits)


def _is_count(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _position(entries: list[Observation], entry: Observation) -> int:
    found = next((i for i, e in enumerate(entries) if e is entry), None)
    if found is None:
        found = next((i for i in reversed(range(len(entries))) if entries[i] == entry), None)
    if found is None:
        raise ValueError(f"the shadow log holds no observation {entry!r}")
    return found


def _observation(directory: Path, line_number: int, line: str) -> Observation:
    where = f"{directory}: file {LOG_FILE!r}, line {line_number}"
    try:
        obj = strict_json.loads(line)
    except ValueError as exc:
        raise GateLoadError(f"{where}: not readable JSON ({exc})") from None
    if not isinstance(obj, dict) or set(obj) != _FIELDS:
        raise GateLoadError(f"{where}: expected the fields {', '.join(sorted(_FIELDS))}")
    probability, helps = obj["probability"], obj["helps"]
    is_verdict = obj["source"] == "verdict"
    if (
        not isinstance(obj["question"], str)
        or not isinstance(obj["draft"], str)
        or obj["source"] not in SOURCES
        or not (obj["answer"] is None if is_verdict else isinstance(obj["answer"], str))
        or isinstance(probability, bool)
        or not isinstance(probability, (int, float))
        or not 0 < probability <= 1
        or (helps not in (None, 0, 1) or isinstance(helps, bool))
        or (helps is None and not is_verdict)
        or any(not (isinstance(obj[k], bool) if is_verdict else obj[k] is None) for k in ("retrieved", "correct"))
    ):
        raise GateLoadError(f"{where}: a field has the wrong type or value")
    fields = {**obj, "probability": float(probability), "helps": None if helps is None else float(helps)}
    return Observation(**fields)


# ---------------------------------------------------------------------- the refit
@dataclass(frozen=True)
class Refit:
    """A refitted combiner, the default threshold it decides by, and what it learnt
    from: the fit's rows and the observations (``used``: those that taught it)."""

    combiner: FeatureCombiner
    threshold: float
    fit_rows: int
    used: int


def teaching(entries: Sequence[Observation]) -> np.ndarray:
    """Which observations teach a refit: each with a label, but not a pair of a
    question whose latest labelled verdict stands (it outranks the agreement pairs),
    nor a verdict a later one on the same question replaced."""
    latest: dict[str, int] = {}
    for i, e in enumerate(entries):
        if e.source == "verdict" and e.helps is not None:
            latest[same_question(e.question)] = i
    keep = np.zeros(len(entries), dtype=bool)
    for i, e in enumerate(entries):
        if e.helps is None:
            continue
        judged = latest.get(same_question(e.question))
        keep[i] = judged is None or (e.source == "verdict" and judged == i)
    return keep


def refit(
    combiner: FeatureCombiner,
    fit_rows: FitRows | None,
    entries: Sequence[Observation],
    features: np.ndarray,
    embeddings: np.ndarray | None,
    *,
    C: float,
    seed: int = 0,
) -> Refit | None:
    """``combiner`` refitted on the ``"helps"`` target from the fit's rows (weight 1
    each; ``None``: the gate keeps none) and the observations that teach
    (``teaching``), each weighted by the inverse of its chance to be observed.
    ``None`` when there is too little to learn from: without fit rows, fewer than
    ``MIN_ROWS`` observations teach, or they all say the same. The threshold is set
    by the fit's rule (``combiner.default_threshold``) on the fit's rows (else the
    observations)."""
    keep = teaching(entries)
    used = [e for e, k in zip(entries, keep) if k]
    x = np.asarray(features, dtype=np.float64)[keep]
    e = None if embeddings is None else np.asarray(embeddings, dtype=np.float64)[keep]
    helps = np.array([u.helps for u in used], dtype=np.float64)
    weights = np.array([u.weight for u in used], dtype=np.float64)
    if fit_rows is None:
        if len(used) < MIN_ROWS or len(set(helps.tolist())) < 2:
            return None
        reference_x, reference_e, rows = x, e, len(used)
    else:
        reference_x, reference_e, rows = fit_rows.features, fit_rows.embeddings, len(fit_rows)
        x = np.vstack([fit_rows.features, x])
        helps = np.r_[fit_rows.helps, helps]
        weights = np.r_[np.ones(len(fit_rows)), weights]
        if e is not None:
            assert fit_rows.embeddings is not None  # a gate that embeds keeps its rows' embeddings
            e = np.vstack([fit_rows.embeddings, e])
    refitted = refit_feature_combiner(
        combiner, x, {TARGET: helps}, embeddings=e, rows=rows, C=C, seed=seed, sample_weight=weights, target=TARGET
    )
    help_rate = float(np.average(helps, weights=weights))
    threshold = default_threshold(refitted, reference_x, reference_e, help_rate)
    return Refit(refitted, threshold, 0 if fit_rows is None else len(fit_rows), len(used))
