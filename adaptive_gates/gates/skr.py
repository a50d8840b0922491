"""SKR: Self-Knowledge guided Retrieval (Wang et al., Findings EMNLP 2023), SPEC §1.

Two gates over a memory of labelled past questions (D+ known, D- unknown):

- ``SKRKnnGate`` (the paper's best): the k nearest past questions vote;
- ``SKRClassifierGate``: a logistic-regression head on frozen embeddings.

Both keep learning: ``add()`` puts newly labelled questions into the memory, and
``record_feedback()`` turns an answered question into such a label (rule:
``adaptive_gates.gates.base.feedback``), logged and saved with the gate. A question's latest
feedback label (its verdict) outweighs every other label of it in the memory, and
feedback never moves the prior the ratio vote's threshold is derived from (see
``SKRKnnGate`` for the rule this gives). A memory that keeps verdicts itself (a
``VerdictMemory``, e.g. ``MilvusMemory``) holds them for every process sharing it, and
``attach_memory`` moves a fitted gate onto such a memory.
"""

from __future__ import annotations

import logging
import threading
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, get_args

import numpy as np

from ..errors import GateLoadError
from ..memory.memories import FaissMemory, RemovableMemory, SKRMemory, keeps_verdicts, l2_normalise
from ..models.protocols import Embedder, check_vectors
from ..persistence.saved_format import load_array, save_array
from ..records.data import OutcomeRecord
from ..records.selfknowledge import KNOWN, UNKNOWN, TiePolicy, label_outcomes
from ..records.validation import check_labels, check_questions
from .base.calibration import first_caller_outside_package
from .base.constraints import Callable as IsCallable
from .base.constraints import Integer, OneOf, Real
from .base.encoder_record import check_encoder_record, encoder_record
from .base.feedback import Feedback, FeedbackLog, FeedbackNotSupportedError, LearnsFromFeedback
from .base.gate import Gate
from .base.given_vectors import DecidesFromVectors, given_or

logger = logging.getLogger(__name__)

Vote = Literal["ratio", "majority"]
Weighting = Literal["uniform", "similarity"]


MemoryFactory = Callable[[int], SKRMemory]


class _SKRMemoryGate(LearnsFromFeedback, Gate):
    """Shared machinery: the embedder, the memory, fit/add and their persistence.

    ``memory`` makes the empty memory a fit fills, given the embedding dimension
    (default ``FaissMemory``); any ``SKRMemory`` will do. A memory class with a
    ``load`` classmethod can be loaded back from a saved gate.
    """

    _fitted_state: ClassVar[tuple[str, ...]] = ("_memory", "_feedback", "_prior")
    backend_params = frozenset({"embedder", "memory"})
    fitted_by = "fit(questions, labels) or fit_outcomes(records)"
    _parameter_constraints: ClassVar[dict[str, Any]] = {"memory": [IsCallable(), None]}

    def __init__(
        self, embedder: Embedder | None = None, *, memory: MemoryFactory | None = None, fallback_retrieve: bool = True
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.embedder = embedder
        self.memory = memory
        self._default_encoder: Embedder | None = None
        self._memory: SKRMemory | None = None
        self._feedback: FeedbackLog | None = None
        self._prior: tuple[int, int] | None = None
        self._prior_lock = threading.Lock()

    # ------------------------------------------------------------------ backend
    def _encoder(self) -> Embedder:
        """The sentence encoder in use; the embedded all-MiniLM-L6-v2 unless one was given."""
        return self._given_or_default_encoder(self.embedder)

    def _embed(self, questions: list[str]) -> np.ndarray:
        return given_or(questions, self._encode)  # a vector decide_vector gave, if any

    def _encode(self, questions: list[str]) -> np.ndarray:
        encoder = self._encoder()
        return check_vectors(encoder.embed(questions), len(questions), encoder.model_id)

    def _vector_dimension(self) -> int:
        return int(self._encoder().dimension)

    @property
    def _memory_factory(self) -> MemoryFactory:
        return FaissMemory if self.memory is None else self.memory

    # ------------------------------------------------------------------ fitting
    @property
    def is_fitted(self) -> bool:
        return self._memory is not None

    @property
    def memory_(self) -> SKRMemory:
        """The self-knowledge memory (fitted state)."""
        if self._memory is None:
            raise self._not_fitted()
        return self._memory

    @property
    def prior_counts_(self) -> tuple[int, int]:
        """``(m, n)``: the known and unknown questions given to ``fit`` and ``add``,
        feedback left out. Only questions answered without retrieval get feedback
        labels, so they are no sample of the traffic to estimate the class prior from."""
        self._check_fitted()
        return self._fitted_value(self._prior)

    def fit(self, questions: Sequence[str], labels: Sequence[int]) -> Self:
        """Learn from labelled questions: label 1 = retrieval helped (D-), 0 = known (D+)."""
        clean = check_questions(questions)
        labels = check_labels(labels, len(clean))
        if KNOWN not in labels or UNKNOWN not in labels:
            raise ValueError("SKR needs both known (0) and unknown (1) questions to fit")
        vectors = self._embed(clean)
        memory = self._memory_factory(vectors.shape[1])
        if not isinstance(memory, SKRMemory):
            raise TypeError(f"memory={self.memory!r} made {type(memory).__name__}, which is no SKRMemory")
        memory.add(vectors, labels, clean)
        self._memory = memory
        self._feedback = FeedbackLog()  # the feedback of the memory this fit replaces
        self._prior = memory.counts
        self._after_memory_change()
        logger.info("%s fitted on %d questions (m=%d known, n=%d unknown)", self.name, len(clean), *memory.counts)
        return self

    def _fit_outcomes(self, records: list[OutcomeRecord], metric: str, ties: TiePolicy = "known") -> None:
        """Label outcome records (SPEC §1.1; ``ties`` as ``label_outcomes``) and fit on them."""
        knowledge = label_outcomes(records, metric=metric, ties=ties)
        self.fit(knowledge.questions, knowledge.labels)

    def add(self, questions: Sequence[str], labels: Sequence[int]) -> Self:
        """Add newly labelled questions to the memory; safe while others decide."""
        clean = check_questions(questions)
        labels = check_labels(labels, len(clean))
        if clean:
            self.memory_.add(self._embed(clean), labels, clean)
            unknown = int(np.sum(labels))
            with self._prior_lock:
                m, n = self.prior_counts_
                self._prior = (m + len(clean) - unknown, n + unknown)
            self._after_memory_change()
        return self

    def attach_memory(self, memory: SKRMemory) -> Self:
        """Decide from ``memory`` from now on, and learn into it (e.g. a ``MilvusMemory``
        shared by several processes). An empty one is first filled with every question
        of the current memory under its verdict; one holding questions is taken as it is
        (the shared memory an earlier process filled). ``prior_counts_`` stays as it was."""
        current = self.memory_
        if not isinstance(memory, SKRMemory):
            raise TypeError(f"attach_memory needs an SKRMemory, got {type(memory).__name__}")
        if memory.dimension != current.dimension:
            raise ValueError(
                f"the memory holds {memory.dimension}-d vectors but the gate's encoder gives {current.dimension}-d ones"
            )
        if len(memory):
            logger.info("%s attached to a memory of %d questions, taken as it is", self.name, len(memory))
        else:
            vectors, labels, questions = self._entries()
            memory.add(vectors, labels.tolist(), questions)
            logger.info("%s moved its %d questions into a new %s", self.name, len(memory), type(memory).__name__)
        self._memory = memory
        self._after_memory_change()
        return self

    def _after_memory_change(self) -> None:
        """Hook for state derived from the memory (e.g. a classifier)."""

    # ------------------------------------------------------------------ feedback
    def _learn(self, entry: Feedback) -> None:
        """The label the observation gives (if any) joins the memory as one more copy of
        the question and becomes its verdict, read in place of the label of every copy
        (a training one included), so later decisions on it and on similar questions
        follow it, the more so the more often it is given."""
        log = self.feedback_
        if entry.label is None:
            log.append(entry)
            return
        memory = self.memory_
        vector = self._embed([entry.question])
        if keeps_verdicts(memory):  # relabelled where every process sharing the memory reads it
            # before the copy is added: a failure between the two leaves no copy, so the
            # verdict sent again adds one
            memory.set_verdict(entry.question, entry.label)
        memory.add(vector, [entry.label], [entry.question])
        log.append(entry)  # from here on the verdict relabels the earlier copies
        self._after_memory_change()

    def _unlearn(self, entry: Feedback) -> None:
        """The copy the observation added leaves the memory, and the question's verdict
        goes back to the latest one left (or, with none, each copy's own label)."""
        log = self.feedback_
        if entry.label is None:
            log.withdraw(entry)
            return
        memory = self.memory_
        if not isinstance(memory, RemovableMemory):
            raise FeedbackNotSupportedError(
                f"{type(memory).__name__} cannot remove a question, so {self.name} cannot take back a lesson"
            )
        log.check_holds(entry)  # an entry the log does not hold changes nothing
        if not memory.remove_copy(entry.question, entry.label):
            logger.warning("%s: the memory held no copy of %r to withdraw", self.name, entry.question)
        log.withdraw(entry)
        if keeps_verdicts(memory):
            memory.set_verdict(entry.question, log.verdict(entry.question))
        self._after_memory_change()

    def _relabelled(self, labels: np.ndarray, questions: list[str]) -> np.ndarray:
        """The labels with the log's verdicts, unless the memory keeps them itself."""
        log = self._feedback
        if log is None or self._memory is None or keeps_verdicts(self._memory):
            return labels
        return log.relabel(labels, questions)

    def _search(self, vectors: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray, list[list[str]]]:
        """``memory_.search`` with the labels feedback gave (a question's verdict)."""
        sims, labels, texts = self.memory_.search(vectors, k)
        flat = self._relabelled(labels.reshape(-1), [q for row in texts for q in row])
        return sims, flat.reshape(labels.shape), texts

    def _entries(self) -> tuple[np.ndarray, np.ndarray, list[str]]:
        """``memory_.entries`` with the labels feedback gave (a question's verdict)."""
        vectors, labels, questions = self.memory_.entries()
        return vectors, self._relabelled(labels, questions), questions

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        with self._lesson_lock():  # no lesson half learnt or half withdrawn in the save
            return self._save_memory_and_log(directory)

    def _save_memory_and_log(self, directory: Path) -> dict[str, Any]:
        memory = self.memory_
        try:
            state = memory.save(directory)
        except NotImplementedError as exc:
            raise NotImplementedError(
                f"{type(self).__name__} cannot be saved: its memory {type(memory).__name__} "
                f"cannot write itself to a directory ({exc or 'no save'})"
            ) from exc
        state["memory"] = memory.kind
        if len(self.feedback_):  # a gate without feedback saves as before
            state["feedback"] = self.feedback_.save(directory)
        state["prior_counts"] = list(self.prior_counts_)
        state["encoder"] = encoder_record(self._encoder(), memory.dimension)
        return state

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        dimension = check_encoder_record(directory, state.get("encoder"), self.embedder)
        memory = self._load_memory(directory, state)
        if memory.dimension != dimension:
            raise GateLoadError(
                f"{directory}: field 'state.encoder.dimension' is {dimension} "
                f"but the memory holds {memory.dimension}-d vectors"
            )
        feedback = FeedbackLog.load(directory, state.get("feedback"))
        self._prior = _saved_prior(directory, state, memory, feedback)
        self._memory, self._feedback = memory, feedback

    def _load_memory(self, directory: Path, state: dict[str, Any]) -> SKRMemory:
        """The saved memory, read by the kind of memory this gate makes."""
        factory = self._memory_factory
        saved = state.get("memory", FaissMemory.kind)  # saves before the memory kind was recorded are faiss
        kind = getattr(factory, "kind", None)
        if saved != kind:
            raise GateLoadError(
                f"{directory}: field 'state.memory' is {saved!r} but the given memory is {kind or factory!r}; "
                "pass memory= with the kind of memory it was saved with"
            )
        load = getattr(factory, "load", None)
        if not callable(load):
            raise GateLoadError(f"{directory}: memory {factory!r} has no load() to read a saved memory")
        return load(directory, state)


def _saved_prior(directory: Path, state: dict[str, Any], memory: SKRMemory, feedback: FeedbackLog) -> tuple[int, int]:
    """The prior counts a gate was saved with. A save that predates them added every
    labelled observation to the memory, so its prior is the memory's counts less those."""
    saved = state.get("prior_counts")
    if saved is None:
        labelled = [e.label for e in feedback.entries() if e.label is not None]
        m, n = memory.counts
        saved = [m - labelled.count(KNOWN), n - labelled.count(UNKNOWN)]
    if (
        not isinstance(saved, list)
        or len(saved) != 2
        or any(isinstance(c, bool) or not isinstance(c, int) or c < 0 for c in saved)
        or sum(saved) > len(memory)
    ):
        raise GateLoadError(
            f"{directory}: field 'state.prior_counts' must be two counts >= 0 within the memory's "
            f"{len(memory)} questions, got {saved!r}"
        )
    return saved[0], saved[1]


class SKRKnnGate(_SKRMemoryGate, DecidesFromVectors):
    """SKR-kNN: retrieve when the nearest past questions were mostly unknown.

    Need score: the share of D- (unknown) questions among the k nearest
    neighbours (cosine similarity), optionally similarity-weighted.

    Feedback rule (``record_feedback``; the memory searched exactly, as ``FaissMemory``
    is below its ``switch_at`` rows and ``ExactMemory`` always is):

    - a verdict that a direct answer was wrong (an unknown label) never lowers any
      question's need score, the judged one's included, and never moves the threshold,
      so it never turns a retrieve decision into a direct one, however often repeated;
    - a verdict that a direct answer was right (a known label) never raises any need
      score nor moves the threshold: it never turns a direct decision into retrieval;
    - a verdict on an answer with retrieval changes no score and no decision.

    Each labelled verdict adds a copy of the question to the memory, and the latest
    verdict is the label of every copy (a training one included): after ``k`` verdicts
    in a row that its direct answer was wrong, a question's k nearest neighbours are all
    its own unknown copies, its score is 1 and it retrieves (at any threshold below 1).

    Why the rule holds: an unknown verdict only adds an unknown neighbour and turns
    known copies of the question unknown, which can only raise a share of unknown
    neighbours, weighted by similarity or not; and the threshold is fixed by
    calibration or derived from ``prior_counts_``, which feedback does not change. An
    approximate index (HNSW, IVF) may return other neighbours after any add, so there
    the rule holds only as far as its search is exact.

    Args:
        embedder: sentence encoder (default: the embedded all-MiniLM-L6-v2).
        k: number of neighbours (paper 3-10, authors' code 5-10).
        vote: ``"ratio"`` (paper, default): known iff l/(k-l) >= m/n, i.e. the
            D- share is at most n/(m+n); ``"majority"`` (authors' code): strict
            majority, a tie goes to the smaller class.
        weighting: ``"uniform"`` (paper) or ``"similarity"`` (weights = cosine
            similarity clipped at 0; gives graded scores for calibration).
        memory: makes the memory from the embedding dimension (default
            ``FaissMemory``; any ``SKRMemory``, e.g. ``ExactMemory``, a vector store's
            or ``MilvusMemory.factory(uri, collection)``).
        fallback_retrieve: the decision taken when a question or backend fails.
    """

    name = "skr-knn"
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "k": Integer(1),
        "vote": OneOf(*get_args(Vote)),
        "weighting": OneOf(*get_args(Weighting)),
    }

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        k: int = 10,
        vote: Vote = "ratio",
        weighting: Weighting = "uniform",
        memory: MemoryFactory | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(embedder, memory=memory, fallback_retrieve=fallback_retrieve)
        self.k = k
        self.vote = vote
        self.weighting = weighting

    def fit(self, questions: Sequence[str], labels: Sequence[int]) -> Self:
        """As ``_SKRMemoryGate.fit``; warns (``UserWarning``) when ``k`` is not below the
        number of questions, which makes every question's neighbours the whole memory."""
        super().fit(questions, labels)
        size = len(self.memory_)
        if self.k >= size:
            warnings.warn(
                f"skr-knn: k={self.k} neighbours of a memory of {size} questions: every question gets all "
                f"{size} as its neighbours, hence the same score (the memory's unknown share) and the same "
                f"decision; k={size} is used until the memory grows. Choose k well below {size} (paper: 3-10)",
                UserWarning,
                stacklevel=first_caller_outside_package(),
            )
        return self

    def _default_threshold(self) -> float:
        if self.vote == "majority":
            return 0.5
        m, n = self.prior_counts_
        # l/(k-l) >= m/n  <=>  (k-l)/k <= n/(m+n): the D- prior share.
        return n / (m + n)

    def retrieves(self, scores: np.ndarray, threshold: float | None = None) -> np.ndarray:
        """The vote at ``threshold``; under the uncalibrated majority vote a score
        equal to it (a tied vote) goes to the smaller class."""
        scores = np.asarray(scores)
        threshold = self.threshold_ if threshold is None else threshold
        retrieve = scores > threshold
        if self.vote == "majority" and self.calibration_ is None:
            m, n = self.prior_counts_
            # D- when the classes are even, erring towards retrieval.
            retrieve |= (scores == threshold) & (n <= m)
        return retrieve

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        sims, labels, texts = self._search(self._embed(questions), self.k)
        unknown = (labels == UNKNOWN).astype(np.float64)
        if self.weighting == "similarity":
            weights = np.clip(sims.astype(np.float64), 0.0, None)
            total = weights.sum(axis=1)
            weighted = (weights * unknown).sum(axis=1) / np.where(total > 0, total, 1.0)
            scores = np.where(total > 0, weighted, unknown.mean(axis=1))
        else:
            scores = unknown.mean(axis=1)
        details = [
            {
                "k": int(row_labels.size),
                "n_known": int((row_labels == KNOWN).sum()),
                "vote": self.vote,
                "neighbours": [
                    {"question": t, "label": "unknown" if lab == UNKNOWN else "known", "similarity": float(s)}
                    for t, lab, s in zip(row_texts, row_labels, row_sims)
                ],
            }
            for row_sims, row_labels, row_texts in zip(sims, labels, texts)
        ]
        return scores, details


class SKRClassifierGate(_SKRMemoryGate, DecidesFromVectors):
    """SKR-cls: a logistic-regression head on frozen sentence embeddings.

    Need score: the predicted probability that the question is unknown (D-).
    The paper fine-tunes BERT-base; a linear head on frozen embeddings is the
    light form. ``add()`` refits the head on the grown memory, and so does feedback,
    with each judged question's verdict as the label of all its copies; a refitted
    head may move any score, so ``SKRKnnGate``'s feedback rule is not guaranteed here.

    Args:
        embedder: sentence encoder (default: the embedded all-MiniLM-L6-v2).
        C: inverse regularisation strength.
        class_weight: ``None`` or ``"balanced"`` (re-weights the rarer class).
        memory: as ``SKRKnnGate`` (the head is trained on the memory's entries).
        fallback_retrieve: the decision taken when a question or backend fails.
    """

    name = "skr-cls"
    _fitted_state = ("_coef", "_intercept")
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "C": Real(0, closed="neither"),
        "class_weight": [OneOf("balanced"), None],
    }

    def __init__(
        self,
        embedder: Embedder | None = None,
        *,
        C: float = 1.0,
        class_weight: Literal["balanced"] | None = None,
        memory: MemoryFactory | None = None,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(embedder, memory=memory, fallback_retrieve=fallback_retrieve)
        self.C = C
        self.class_weight = class_weight
        self._coef: np.ndarray | None = None
        self._intercept: float | None = None

    @property
    def is_fitted(self) -> bool:
        return self._memory is not None and self._coef is not None

    def _default_threshold(self) -> float:
        return 0.5

    def _after_memory_change(self) -> None:
        from sklearn.linear_model import LogisticRegression

        head = LogisticRegression(C=self.C, class_weight=self.class_weight, max_iter=2000)
        vectors, labels, _ = self._entries()
        head.fit(vectors, labels)
        # Kept as plain arrays: scoring and persistence need no sklearn object.
        self._coef = head.coef_[0].astype(np.float64)
        self._intercept = float(head.intercept_[0])

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        coef, intercept = self._fitted_value(self._coef), self._fitted_value(self._intercept)
        logits = l2_normalise(self._embed(questions)).astype(np.float64) @ coef + intercept
        p_unknown = 1.0 / (1.0 + np.exp(-logits))
        return p_unknown, [{"p_unknown": float(p), "logit": float(z)} for p, z in zip(p_unknown, logits)]

    def _save_state(self, directory: Path) -> dict[str, Any]:
        state = super()._save_state(directory)
        save_array(directory, "coef.npy", self._fitted_value(self._coef))
        state["intercept"] = self._intercept
        return state

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        super()._load_state(directory, state)
        coef = load_array(directory, "coef.npy").astype(np.float64)
        if coef.shape != (self.memory_.dimension,):
            raise GateLoadError(
                f"{directory}: file 'coef.npy' has shape {coef.shape}, expected ({self.memory_.dimension},)"
            )
        if not isinstance(state.get("intercept"), (int, float)):
            raise GateLoadError(f"{directory}: field 'state.intercept' is missing")
        self._coef, self._intercept = coef, float(state["intercept"])
