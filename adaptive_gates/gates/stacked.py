"""The stacked gate: one combiner over the need scores of several gates, cheap features
of the question's wording and the question's sentence embedding.

What is whose: no paper proposes this gate; it is ours entirely. Only its members come
from the literature, each as this package implements it (SKR-kNN and the SKR
classifier, Thrust, IAPEK-BM25, and the popularity rule of Mallen et al.); the
combiner, its inputs, its threshold and feedback rules are our design, chosen by
measurement on AdaRAGUE outcomes (cross-validated; see the project's design notes).

Every published signal alone captures little of what a perfect gate would; they err
on different questions. The stacked gate fits member gates (default: SKR-kNN and the
balanced SKR classifier on MiniLM, Thrust on MiniLM, IAPEK-BM25 and the popularity
gate: no LLM) and a ``FeatureCombiner`` (``combiner``) on their scores plus
``question_features`` and the question's embedding reduced by a PCA learned from the
training rows, learning from *every* outcome row, including the ones SKR drops
because both answers were wrong. The combiner is a strongly regularised logistic
regression, shallow boosted trees, or both rank-averaged (``model="blend"``, the
default). With no members, the question's features and embedding alone make the
question-only stacked gate (``members=""``): nothing to cross-fit, quick to fit.

Leakage: a member scores its own training questions better than new ones (a kNN
memory finds the question itself), so a combiner fitted on in-sample member scores
would trust the members too much. The member scores it learns from are cross-fitted
(``cross_fitted_scores``: each row scored by a member fitted on the other folds);
the members that serve are then refitted on all rows.

Threshold: with the logistic heads alone the need score is an expected gain (retrieve
iff > 0) or P(retrieval helps) (retrieve iff above its training rate). A blended score
is a rank in [0, 1], and trees' probabilities are not calibrated as the logistic
heads' are, so with ``"blend"`` or ``"boosted"`` the fit sets the threshold at the
quantile of the gate's own training scores that makes it retrieve on as many training
rows as the reference model would by that rule: the logistic heads for ``"blend"``, the
trees themselves for ``"boosted"`` (where it falls at about 0, or the base rate). A
refit sets it again the same way on the outcome rows, with the refitted models.

Feedback: ``record_feedback`` logs an observation, and ``refit`` refits the combiner
on the outcome rows it was fitted on (kept with the gate) together with the whole log
(``refit_feature_combiner``: the projection, the standardisation and the blend's
reference scores stay those of the outcome rows). One observation shows one answer:
it teaches the ``"gain"`` target's head of that answer (correctness with or without
retrieval), and the ``"helps"`` target through the self-knowledge label the feedback
rule gives it (``feedback_outcomes``). The members neither learn from feedback nor are
refitted. An observed question that is one of the training rows takes that row's
out-of-fold member scores (a serving member would score it in-sample); any other is
scored by the serving members, which never saw it: out-of-sample too, only by members
fitted on all rows rather than on (folds - 1)/folds of them.

Persistence: one directory; the members are saved into it as ``gates.base.saved`` does for
every gate that holds gates (each in its sub-folder ``member-<i>-<name>/``), beside the
combiner's files (``FeatureCombiner.write_files``), its training rows, the default
threshold and the feedback log. A gate saved before the combiner took embeddings and
trees (its combiner a logistic ``Combiner``, its parameters without ``model`` and
``embedding``) loads as what it was: a logistic-only ``FeatureCombiner`` without an
embedding.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

import numpy as np

from ..errors import GateLoadError
from ..models.embedding.cached import CachedEmbedder
from ..models.protocols import Embedder, check_vectors
from ..records.answer_metrics import normalize_answer
from ..records.data import OutcomeRecord
from ..records.selfknowledge import outcome_scores
from ..records.validation import MAX_EMBEDDING_DIMS
from ..signals.question_features import FEATURE_NAMES, question_features
from .base.constraints import Boolean, Integer, OneOf, Real
from .base.encoder_record import check_encoder_record, encoder_record
from .base.feedback import FeedbackLog, LearnsFromFeedback
from .base.folds import cross_fitted_scores
from .base.gate import Gate
from .base.saved import save_member
from .bm25_difficulty import BM25DifficultyGate
from .combiner.features import (
    MODELS,
    FeatureCombiner,
    Model,
    default_threshold,
    fit_feature_combiner,
    refit_feature_combiner,
)
from .combiner.held import HoldsCombiner
from .combiner.logistic import TARGETS, Combiner, CombinerRows, Target, feedback_outcomes, head_outcomes
from .popularity import PopularityGate
from .skr import SKRClassifierGate, SKRKnnGate
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


class StackedGate(HoldsCombiner, LearnsFromFeedback, Gate):
    """Retrieve when a combiner of member gates, question features and the question's
    embedding expects it to pay.

    It learns from feedback on demand: ``record_feedback`` logs, ``refit`` learns.

    Args:
        embedder: the sentence encoder of the question's embedding and of the members
            that embed questions (default: the embedded all-MiniLM-L6-v2, loaded only
            if the embedding or a member needs it).
        members: member gate names, comma-separated or a list (see ``MEMBERS``);
            may be empty when ``features`` or ``embedding`` is on.
        target: ``"gain"`` (default): need score = P(correct with retrieval) −
            P(correct without); ``"helps"``: need score = P(retrieval helps).
        features: also feed the combiner the question's own features
            (``question_features``).
        embedding: also feed the combiner the question's embedding, reduced to
            ``embedding_dims`` principal components learned from the training rows.
        embedding_dims: how many components of the embedding the combiner sees (at most 65536).
        model: the combiner (``combiner.Model``): ``"blend"`` (default) rank-averages
            the logistic heads and boosted trees, ``"logistic"`` or ``"boosted"`` uses
            one. The default threshold: with ``"logistic"``, 0 for ``"gain"`` and the
            training rate of "retrieval helps" for ``"helps"``; otherwise the training
            scores' quantile at which the gate retrieves as often on its training rows
            as that rule applied to the logistic heads (``"blend"``) or to the trees
            (``"boosted"``).
        C: inverse regularisation strength of the combiner's logistic heads (small: strong).
        folds: folds of the members' cross-fitted training scores.
        seed: seed of those folds, of the PCA and of the trees.
        fallback_retrieve: the decision taken when a question or backend fails.
    """

    name = "stacked"
    backend_params = frozenset({"embedder"})
    fitted_by = "fit_outcomes(records)"
    _fitted_state = ("_members", "_combiner", "_rows", "_feedback", "_threshold")
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "target": OneOf(*TARGETS),
        "features": Boolean(),
        "embedding": Boolean(),
        "embedding_dims": Integer(1, MAX_EMBEDDING_DIMS),
        "model": OneOf(*MODELS),
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
        embedding: bool = True,
        embedding_dims: int = 32,
        model: Model = "blend",
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
        self.embedding = embedding
        self.embedding_dims = embedding_dims
        self.model = model
        self.C = C
        self.folds = folds
        self.seed = seed
        self._names = parse_members(members)
        self._default_encoder: Embedder | None = None
        self._members: list[Gate] | None = None
        self._combiner: FeatureCombiner | None = None
        self._rows: CombinerRows | None = None
        self._feedback: FeedbackLog | None = None
        self._threshold: float | None = None

    @classmethod
    def _check_params(cls, params: dict[str, Any]) -> None:
        names = parse_members(params["members"])  # refuses bad names
        if not names and not params["features"] and not params["embedding"]:
            raise ValueError(
                "a stacked gate needs members, question features, the question's embedding, or some of them"
            )

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
    def feature_names_(self) -> list[str]:
        """The combiner's named columns in order: the members' scores, then the question
        features (the embedding's components follow them, unnamed)."""
        return [f"member:{n}" for n in self._names] + (list(FEATURE_NAMES) if self.features else [])

    def _encoder(self) -> Embedder | None:
        """The encoder of the question's embedding and of the members that embed
        questions; ``None`` if neither needs one."""
        if not self.embedding and not any(MEMBERS[n].backend for n in self._names):
            return None
        return self._given_or_default_encoder(self.embedder)

    def _embeddings(self, questions: list[str], encoder: Embedder | None = None) -> np.ndarray | None:
        """The questions' embeddings the combiner reads (``None`` without ``embedding``);
        ``encoder``: one to embed with instead of the gate's (a memo in front of it)."""
        if not self.embedding:
            return None
        if encoder is None:  # (not `or`: an empty memo is falsy)
            encoder = self._encoder()
        assert encoder is not None  # the embedding needs one, so _encoder gives one
        return check_vectors(encoder.embed(questions), len(questions), encoder.model_id).astype(np.float64)

    # ------------------------------------------------------------------ fitting
    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str) -> None:
        """Fit the members and the combiner on outcome records (all of them)."""
        if len(records) < 2 * self.folds:
            raise ValueError(
                f"stacked gate: {len(records)} outcome records are too few for {self.folds}-fold cross-fitting"
            )
        a, b = outcome_scores(records, metric)
        questions = [r.question for r in records]
        encoder = self._encoder()
        # The fold members see each question several times: embed it once.
        fold_encoder = CachedEmbedder(encoder) if encoder is not None else None
        embeddings = self._embeddings(questions, fold_encoder)
        columns = [member_scores(n, records, metric, self.folds, self.seed, fold_encoder) for n in self._names]
        members = [fit_member(n, records, metric, encoder) for n in self._names]
        rows = CombinerRows(tuple(questions), self._features(columns, questions), a, b)
        combiner = fit_feature_combiner(
            rows.features,
            self.feature_names_,
            a,
            b,
            embeddings=embeddings,
            embedding_dims=self.embedding_dims,
            target=self.target,
            model=self.model,
            C=self.C,
            seed=self.seed,
        )
        threshold = default_threshold(combiner, rows.features, embeddings, _help_rate(head_outcomes(a, b, self.target)))
        self._members, self._combiner, self._rows, self._feedback = members, combiner, rows, FeedbackLog()
        self._threshold = threshold
        logger.info(
            "stacked gate fitted on %d records: members %s, target %s, model %s, embedding %s",
            len(records),
            self._names,
            self.target,
            self.model,
            self.embedding,
        )

    def _features(self, member_scores: list[np.ndarray], questions: list[str]) -> np.ndarray:
        """The combiner's named columns (as ``feature_names_``) of each question."""
        blocks = [np.column_stack(member_scores)] if member_scores else []
        if self.features:
            blocks.append(question_features(questions))
        return np.hstack(blocks) if blocks else np.empty((len(questions), 0))

    def _default_threshold(self) -> float:
        return self._fitted_value(self._threshold)

    # ------------------------------------------------------------------ feedback (logged; learnt by refit)
    def refit(self) -> Self:
        """Refit the combiner on the outcome rows it was first fitted on and every
        feedback observation logged so far (the members stay as they are)."""
        self._check_fitted()
        rows, entries = self._fitted_value(self._rows), self.feedback_.entries()
        features, outcomes = rows.features, head_outcomes(rows.a, rows.b, self.target)
        questions = list(rows.questions)
        if entries:
            features = np.vstack([features, self._feedback_features([e.question for e in entries])])
            learned = feedback_outcomes(entries, self.target)
            outcomes = {head: np.r_[y, learned[head]] for head, y in outcomes.items()}
            questions += [e.question for e in entries]
        # The rows' embeddings are not kept with the gate: the questions are embedded
        # again. The encoder is deterministic and is the one that embeds served
        # questions (a load refuses another), so this gives the vectors the fit read,
        # at the cost of one embedding pass, and saves no second copy of the rows.
        embeddings = self._embeddings(questions)
        combiner = refit_feature_combiner(
            self.combiner_,
            features,
            outcomes,
            embeddings=embeddings,
            rows=len(rows.questions),
            C=self.C,
            seed=self.seed,
        )
        n = len(rows.questions)
        self._threshold = default_threshold(
            combiner, rows.features, None if embeddings is None else embeddings[:n], _help_rate(outcomes)
        )
        self._combiner = combiner
        if self._calibration is not None:
            logger.warning(
                "%s refitted: its calibration was made on the previous combiner's scores; calibrate it again", self.name
            )
        logger.info(
            "%s refitted on %d outcome rows and %d feedback observations", self.name, len(rows.questions), len(entries)
        )
        return self

    def _feedback_features(self, questions: list[str]) -> np.ndarray:
        """The combiner's named columns of observed questions: a training question's own
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
        embeddings = self._embeddings(questions)
        combiner = self.combiner_
        scores = combiner.score(features, embeddings)
        heads = _head_probabilities(combiner, combiner.inputs(features, embeddings))
        models = combiner.model_scores(features, embeddings) if combiner.model == "blend" else {}
        details = [
            {
                "target": self.target,
                "model": combiner.model,
                "members": {n: float(s[i]) for n, s in zip(self._names, member_scores)},
                **{f"p_{head}": float(p[i]) for head, p in heads.items()},
                **({"model_scores": {m: float(s[i]) for m, s in models.items()}} if models else {}),
            }
            for i in range(len(questions))
        ]
        return scores, details

    # ------------------------------------------------------------------ persistence
    @classmethod
    def _from_saved(cls, path: Path, state: dict[str, Any], params: dict[str, Any], backends: dict[str, Any]) -> Self:
        if "model" not in params and "embedding" not in params and _is_logistic_state(state.get("combiner")):
            # saved before the combiner took embeddings and trees: it is what it was then
            params = {**params, "model": "logistic", "embedding": False}
        return super()._from_saved(path, state, params, backends)

    def _save_state(self, directory: Path) -> dict[str, Any]:
        state: dict[str, Any] = {
            "members": [
                save_member(gate, directory, f"member-{i}-{name}")
                for i, (name, gate) in enumerate(zip(self._names, self._fitted_value(self._members)))
            ],
            "feature_names": self.feature_names_,
            "combiner": self.combiner_.write_files(directory),
            "rows": self._fitted_value(self._rows).save(directory),
            "default_threshold": self._default_threshold(),
        }
        if self.embedding:
            encoder = self._encoder()
            assert encoder is not None  # the embedding needs one
            state["encoder"] = encoder_record(encoder, encoder.dimension)
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
        if self.embedding:
            check_encoder_record(directory, state.get("encoder"), self.embedder)
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
        combiner = self._load_combiner(directory, state.get("combiner"))
        if "default_threshold" in state:
            threshold = state["default_threshold"]
            if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
                raise GateLoadError(f"{directory}: field 'state.default_threshold' must be a finite number")
        elif combiner.logistic is not None and combiner.model == "logistic":  # saved before it was kept
            threshold = combiner.logistic.base_rate if self.target == "helps" else 0.0
        else:
            raise GateLoadError(f"{directory}: field 'state.default_threshold' is missing")
        rows = CombinerRows.load(directory, state.get("rows"), n_features)
        if self.embedding:
            self._check_projection(directory, combiner, state["encoder"], len(rows.questions))
        self._feedback = FeedbackLog.load(directory, state.get("feedback"))
        self._members, self._combiner, self._rows, self._threshold = members, combiner, rows, float(threshold)

    def _load_combiner(self, directory: Path, state: Any) -> FeatureCombiner:
        """The saved combiner, checked against the gate's parameters; one saved as a
        logistic ``Combiner`` (before ``FeatureCombiner``) loads as its logistic-only form."""
        names = self.feature_names_
        if _is_logistic_state(state):
            if self.model != "logistic" or self.embedding:
                raise GateLoadError(
                    f"{directory}: field 'state.combiner' holds logistic heads alone, without an embedding, "
                    f"but the gate's parameters say model={self.model!r}, embedding={self.embedding!r}"
                )
            logistic = Combiner.load(directory, state, len(names))
            return FeatureCombiner(tuple(names), self.target, "logistic", None, logistic, {}, {})
        combiner = FeatureCombiner.from_files(directory, state, names)
        for field, saved, expected in (("target", combiner.target, self.target), ("model", combiner.model, self.model)):
            if saved != expected:
                raise GateLoadError(
                    f"{directory}: field 'state.combiner.{field}' is {saved!r}, "
                    f"but the gate's parameter {field} is {expected!r}"
                )
        if (combiner.projection is not None) != self.embedding:
            raise GateLoadError(
                f"{directory}: field 'state.combiner.projection' is "
                f"{'set' if combiner.projection is not None else 'null'}, but the gate's parameter embedding is "
                f"{self.embedding!r}"
            )
        return combiner

    def _check_projection(self, directory: Path, combiner: FeatureCombiner, encoder: Any, rows: int) -> None:
        """Refuse an embedding projection that this gate's parameters and saved encoder
        (``state.encoder``) could not have fitted on ``rows`` rows."""
        if combiner.projection is None:
            return
        dims, width = combiner.projection.components.shape
        expected = min(self.embedding_dims, rows, encoder["dimension"])
        if width != encoder["dimension"] or dims != expected:
            raise GateLoadError(
                f"{directory}: field 'state.combiner.projection' is {dims} components of {width}-d vectors, but a "
                f"gate with embedding_dims={self.embedding_dims} fitted on {rows} rows of the encoder's "
                f"{encoder['dimension']}-d vectors has {expected} of {encoder['dimension']}-d"
            )


def _is_logistic_state(state: Any) -> bool:
    """Whether a saved combiner's state is that of a logistic ``Combiner`` (as saved
    before the stacked gate held a ``FeatureCombiner``): heads' intercepts, no model."""
    return isinstance(state, dict) and "intercepts" in state and "model" not in state


def _head_probabilities(combiner: FeatureCombiner, inputs: np.ndarray) -> dict[str, np.ndarray]:
    """Each head's probability of each row of the combiner's ``inputs``: the logistic
    heads' where it has them (calibrated by their loss), else the trees'."""
    if combiner.logistic is not None:
        return combiner.logistic.head_probabilities(inputs)
    return {name: trees.probability(inputs) for name, trees in combiner.boosted.items()}


def _help_rate(outcomes: dict[str, np.ndarray]) -> float:
    """The rate of "retrieval helps" on the rows that teach it (feedback included), for a
    combiner without logistic heads to hold it; 0 for the ``"gain"`` target."""
    return float(np.nanmean(outcomes["helps"])) if "helps" in outcomes else 0.0
