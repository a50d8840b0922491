"""The stacked gate: one combiner over the need scores of several gates and cheap
features of the question's wording.

Every published signal alone captures little of what a perfect gate would; they err
on different questions. The stacked gate fits member gates (default: SKR-kNN and the
balanced SKR classifier on MiniLM, Thrust on MiniLM, IAPEK-BM25 and the popularity
gate: no LLM) and a logistic-regression combiner (``adaptive_gates.gates.stacking``) on their
scores plus ``question_features``, learning from *every* outcome row, including the
ones SKR drops because both answers were wrong.

Leakage: a member scores its own training questions better than new ones (a kNN
memory finds the question itself), so a combiner fitted on in-sample member scores
would trust the members too much. The member scores it learns from are cross-fitted
(``cross_fitted_scores``: each row scored by a member fitted on the other folds);
the members that serve are then refitted on all rows.

Feedback: ``record_feedback`` logs an observation, and ``refit`` refits the combiner
on the outcome rows it was fitted on (kept with the gate) together with the whole log.
One observation shows one answer: it teaches the ``"gain"`` target's head of that
answer (correctness with or without retrieval), and the ``"helps"`` target through
the self-knowledge label the feedback rule gives it (``feedback_outcomes``). The
members neither learn from feedback nor are refitted. An observed question that is one
of the training rows takes that row's out-of-fold member scores (a serving member
would score it in-sample); any other is scored by the serving members, which never saw
it: out-of-sample too, only by members fitted on all rows rather than on
(folds - 1)/folds of them.

Persistence: one directory; the members are saved into it as ``gates.saved`` does for
every gate that holds gates (each in its sub-folder ``member-<i>-<name>/``), beside the
combiner's arrays, its training rows and the feedback log.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np

from ..data import OutcomeRecord
from ..errors import GateLoadError, NotFittedError
from ..feedback import FeedbackLog, LearnsFromFeedback
from ..folds import cross_fitted_scores
from ..metrics import normalize_answer
from ..models.cached_embedder import CachedEmbedder
from ..models.protocols import Embedder
from ..selfknowledge import outcome_scores
from ..signals.question_features import FEATURE_NAMES, question_features
from .base import Gate
from .bm25_difficulty import BM25DifficultyGate
from .constraints import Boolean, Integer, OneOf, Real
from .popularity import PopularityGate
from .saved import save_member
from .skr import SKRClassifierGate, SKRKnnGate
from .stacking import (
    TARGETS,
    Combiner,
    CombinerRows,
    Target,
    feedback_outcomes,
    fit_combiner,
    head_outcomes,
    standardisation,
)
from .thrust import ThrustGate

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class MemberSpec:
    """How the stacked gate builds a member from its encoder, and under which
    constructor argument the encoder goes back in on load (``None``: it takes none)."""

    build: Callable[[Embedder | None], Gate]
    backend: Literal["embedder", "representer"] | None


#: The members a stacked gate can hold: gates that learn from outcome records (or need
#: no fitting) without an LLM. Thrust represents questions with the encoder (its
#: black-box form); its fitting scores set only its own threshold, unused here, so
#: they are taken in-sample.
MEMBERS: dict[str, MemberSpec] = {
    "skr-knn": MemberSpec(lambda e: SKRKnnGate(e, k=10, weighting="similarity"), "embedder"),
    "skr-cls": MemberSpec(lambda e: SKRClassifierGate(e, class_weight="balanced"), "embedder"),
    "thrust": MemberSpec(lambda e: ThrustGate(e, level_scores="in_sample"), "representer"),
    "bm25-difficulty": MemberSpec(lambda e: BM25DifficultyGate(), None),
    "popularity": MemberSpec(lambda e: PopularityGate(), None),
}
DEFAULT_MEMBERS = "skr-knn,skr-cls,thrust,bm25-difficulty,popularity"


def parse_members(members: str | Sequence[str]) -> tuple[str, ...]:
    """Member names from ``"a,b"`` or a list; ``ValueError`` naming an unknown or repeated one."""
    if isinstance(members, str):
        names = tuple(n.strip() for n in members.split(",") if n.strip())
    elif isinstance(members, (list, tuple)) and all(isinstance(n, str) for n in members):
        names = tuple(members)
    else:
        raise ValueError(f"members must be a comma-separated string or a list of gate names, got {members!r}")
    unknown = [n for n in names if n not in MEMBERS]
    if unknown:
        raise ValueError(f"unknown member gate(s) {', '.join(unknown)}; members can be {', '.join(MEMBERS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"members must not repeat a gate, got {', '.join(names)}")
    return names


def member_scores(
    name: str, records: Sequence[OutcomeRecord], metric: str, folds: int, seed: int, encoder: Embedder | None
) -> np.ndarray:
    """The member's cross-fitted need scores of ``records``: each scored by the member
    fitted on the other folds. What the combiner learns from."""
    return cross_fitted_scores(lambda: MEMBERS[name].build(encoder), records, metric, folds, seed)


def fit_member(name: str, records: Sequence[OutcomeRecord], metric: str, encoder: Embedder | None) -> Gate:
    """The member fitted on all ``records``: the one that scores served questions."""
    return MEMBERS[name].build(encoder).fit_outcomes(records, metric)


def _same_question(question: str) -> str:
    """Questions that differ only in case, punctuation or articles are one question
    (as in the feedback log)."""
    return normalize_answer(question)


class StackedGate(LearnsFromFeedback, Gate):
    """Retrieve when a combiner of member gates and question features expects it to pay.

    It learns from feedback on demand: ``record_feedback`` logs, ``refit`` learns.

    Args:
        embedder: the sentence encoder of the members that embed questions (default:
            the embedded all-MiniLM-L6-v2, loaded only if a member needs it).
        members: member gate names, comma-separated or a list (see ``MEMBERS``);
            may be empty when ``features`` is on.
        target: ``"gain"`` (default): need score = P(correct with retrieval) −
            P(correct without), retrieve iff > 0; ``"helps"``: need score =
            P(retrieval helps), retrieve iff above its training rate.
        features: also feed the combiner the question's own features
            (``question_features``).
        C: inverse regularisation strength of the combiner's heads (small: strong).
        folds: folds of the members' cross-fitted training scores.
        seed: seed of those folds.
        fallback_retrieve: the decision taken when a question or backend fails.
    """

    name = "stacked"
    backend_params = frozenset({"embedder"})
    fitted_by = "fit_outcomes(records)"
    _fitted_state = ("_members", "_combiner", "_rows", "_feedback")
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "target": OneOf(*TARGETS),
        "features": Boolean(),
        "C": Real(0, closed="neither"),
        "folds": Integer(2),
        "seed": Integer(),
    }

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        members: str | Sequence[str] = DEFAULT_MEMBERS,
        target: Target = "gain",
        features: bool = True,
        C: float = 0.05,
        folds: int = 5,
        seed: int = 0,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.embedder = embedder
        self.members = members
        self.target = target
        self.features = features
        self.C = C
        self.folds = folds
        self.seed = seed
        self._names = parse_members(members)
        self._encoder_lock = threading.Lock()
        self._default_encoder: Embedder | None = None
        self._members: list[Gate] | None = None
        self._combiner: Combiner | None = None
        self._rows: CombinerRows | None = None
        self._feedback: FeedbackLog | None = None

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        if not parse_members(params["members"]) and not params["features"]:  # parse_members refuses bad names
            raise ValueError("a stacked gate needs members, question features, or both")

    # ------------------------------------------------------------------ state
    @property
    def is_fitted(self) -> bool:
        return self._combiner is not None

    @property
    def members_(self) -> dict[str, Gate]:
        """The fitted member gates by name (those that score served questions)."""
        self._check_fitted()
        return dict(zip(self._names, self._fitted_value(self._members)))

    @property
    def combiner_(self) -> Combiner:
        """The fitted combiner."""
        if self._combiner is None:
            raise NotFittedError(f"{type(self).__name__} is not fitted: call fit_outcomes() or load() first")
        return self._combiner

    @property
    def feature_names_(self) -> list[str]:
        """The combiner's inputs in order: the members' scores, then the question features."""
        return [f"member:{n}" for n in self._names] + (list(FEATURE_NAMES) if self.features else [])

    def _encoder(self) -> Embedder | None:
        """The encoder of the members that embed questions; ``None`` if no member does."""
        if not any(MEMBERS[n].backend for n in self._names):
            return None
        if self.embedder is not None:
            return self.embedder
        with self._encoder_lock:
            if self._default_encoder is None:
                from ..models.defaults import default_embedder

                self._default_encoder = default_embedder()
            return self._default_encoder

    # ------------------------------------------------------------------ fitting
    def fit_outcomes(self, records: Sequence[OutcomeRecord], metric: str = "contains") -> Self:
        """Fit the members and the combiner on outcome records (all of them)."""
        records = list(records)
        if len(records) < 2 * self.folds:
            raise ValueError(
                f"stacked gate: {len(records)} outcome records are too few for {self.folds}-fold cross-fitting"
            )
        a, b = outcome_scores(records, metric)
        questions = [r.question for r in records]
        encoder = self._encoder()
        # The fold members see each question several times: embed it once.
        fold_encoder = CachedEmbedder(encoder) if encoder is not None else None
        columns = [member_scores(n, records, metric, self.folds, self.seed, fold_encoder) for n in self._names]
        members = [fit_member(n, records, metric, encoder) for n in self._names]
        rows = CombinerRows(tuple(questions), self._features(columns, questions), a, b)
        combiner = fit_combiner(rows.features, head_outcomes(a, b, self.target), self.target, self.C)
        self._members, self._combiner, self._rows, self._feedback = members, combiner, rows, FeedbackLog()
        logger.info("stacked gate fitted on %d records: members %s, target %s", len(records), self._names, self.target)
        return self

    def _features(self, member_scores: list[np.ndarray], questions: list[str]) -> np.ndarray:
        """The combiner's input matrix (columns as ``feature_names_``)."""
        blocks = [np.column_stack(member_scores)] if member_scores else []
        if self.features:
            blocks.append(question_features(questions))
        return np.hstack(blocks)

    def _default_threshold(self) -> float:
        return 0.0 if self.target == "gain" else self.combiner_.base_rate

    # ------------------------------------------------------------------ feedback (logged; learnt by refit)
    def refit(self) -> Self:
        """Refit the combiner on the outcome rows it was first fitted on and every
        feedback observation logged so far (the members stay as they are)."""
        self._check_fitted()
        rows, entries = self._fitted_value(self._rows), self.feedback_.entries()
        features, outcomes = rows.features, head_outcomes(rows.a, rows.b, self.target)
        if entries:
            features = np.vstack([features, self._feedback_features([e.question for e in entries])])
            learned = feedback_outcomes(entries, self.target)
            outcomes = {head: np.r_[y, learned[head]] for head, y in outcomes.items()}
        self._combiner = fit_combiner(features, outcomes, self.target, self.C, standardisation(rows.features))
        if self._calibration is not None:
            logger.warning(
                "%s refitted: its calibration was made on the previous combiner's scores; calibrate it again", self.name
            )
        logger.info(
            "%s refitted on %d outcome rows and %d feedback observations", self.name, len(rows.questions), len(entries)
        )
        return self

    def _feedback_features(self, questions: list[str]) -> np.ndarray:
        """The combiner's input rows of observed questions: a training question's own
        row (its members' scores out-of-fold), the serving members' scores otherwise."""
        rows = self._fitted_value(self._rows)
        known: dict[str, int] = {}
        for i, question in enumerate(rows.questions):
            known.setdefault(_same_question(question), i)
        matches = [known.get(_same_question(q)) for q in questions]
        new = [q for q, row in zip(questions, matches) if row is None]
        out = np.empty((len(questions), rows.features.shape[1]))
        if new:
            out[[row is None for row in matches]] = self._features(
                [gate.score(new) for gate in self._fitted_value(self._members)], new
            )
        for i, row in enumerate(matches):
            if row is not None:
                out[i] = rows.features[row]
        return out

    # ------------------------------------------------------------------ scoring
    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        member_scores = [gate.score(questions) for gate in self._fitted_value(self._members)]
        features = self._features(member_scores, questions)
        combiner = self.combiner_
        scores = combiner.score(features)
        heads = combiner.head_probabilities(features)
        details = [
            {
                "target": self.target,
                "members": {n: float(s[i]) for n, s in zip(self._names, member_scores)},
                **{f"p_{head}": float(p[i]) for head, p in heads.items()},
            }
            for i in range(len(questions))
        ]
        return scores, details

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        state = {
            "members": [
                save_member(gate, directory, f"member-{i}-{name}")
                for i, (name, gate) in enumerate(zip(self._names, self._fitted_value(self._members)))
            ],
            "feature_names": self.feature_names_,
            "combiner": self.combiner_.save(directory),
            "rows": self._fitted_value(self._rows).save(directory),
        }
        if len(self.feedback_):  # a gate without feedback saves no log
            state["feedback"] = self.feedback_.save(directory)
        return state

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        if state.get("feature_names") != self.feature_names_:
            raise GateLoadError(
                f"{directory}: field 'state.feature_names' is {state.get('feature_names')!r}, but this version of "
                f"the stacked gate computes {self.feature_names_!r}; fit and save it again"
            )
        saved = state.get("members")
        if not isinstance(saved, list) or len(saved) != len(self._names):
            raise GateLoadError(
                f"{directory}: field 'state.members' does not hold the {len(self._names)} members {list(self._names)}"
            )
        encoder = self._encoder()
        members = []
        for i, (name, member_state) in enumerate(zip(self._names, saved)):
            backend = MEMBERS[name].backend
            member = Gate.load_member(
                directory, member_state, f"member {name!r}", {backend: encoder} if backend else {}
            )
            if member.name != name:
                raise GateLoadError(f"{directory}: member {i} is a {member.name!r} gate, expected {name!r}")
            members.append(member)
        n_features = len(self.feature_names_)
        self._combiner = Combiner.load(directory, state.get("combiner"), n_features)
        self._rows = CombinerRows.load(directory, state.get("rows"), n_features)
        self._feedback = FeedbackLog.load(directory, state.get("feedback"))
        self._members = members
