"""What a draft-check gate needs to learn from served decisions (``gates.shadow`` says
what it learns and how it weighs it): the rows it was fitted on, the log of what it
observed since, refits, verdicts, withdrawals, and their saving with the gate.

``LearnsFromShadows`` is a mixin for ``DraftCheckGate``: the gate keeps its fit rows
(``_keep_fit_rows`` in its fit) and saves and loads this state beside its own
(``_save_learning``, ``_load_learning``). A door that serves the gate's decisions (the
server) records each decision's pair (``record_pair``) and calls ``learn(every)``.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from ...errors import GateLoadError
from ...persistence.saved_format import config_field, library_versions, read_config, write_directory
from ...records.decision import GateDecision
from ...records.validation import check_question
from ..base.feedback import Feedback, FeedbackNotSupportedError, check_feedback
from ..combiner.features import KIND, FeatureCombiner
from .observations import FitRows, Observation, ShadowLog, Source, agreement_helps, pair, refit, verdict

if TYPE_CHECKING:
    from collections.abc import Sequence

    from ...records.data import Hit, OutcomeRecord
    from ..base.calibration import Calibration

logger = logging.getLogger(__name__)

#: The sub-folder holding the combiner the fit made, once observations changed it.
FITTED_FOLDER = "shadow-fitted"


class LearnsFromShadows:
    """Mixin for a draft-check gate (list it before ``Gate``): learning its combiner
    from the pairs and verdicts of served decisions (``gates.shadow``)."""

    _fitted_state: ClassVar[tuple[str, ...]] = ("_fit_rows", "_shadow", "_fitted_combiner")
    _fit_rows: FitRows | None = None
    _shadow: ShadowLog | None = None
    #: The combiner and threshold the fit made, while observations changed them.
    _fitted_combiner: tuple[FeatureCombiner, float] | None = None

    if TYPE_CHECKING:  # what the gate it mixes into provides
        name: ClassVar[str]
        C: float
        logprob_features: bool
        domain_field: str | None
        domain: str | None
        _combiner: FeatureCombiner | None
        _retrieve_above: float | None
        _calibration: Calibration | None

        @property
        def combiner_(self) -> FeatureCombiner: ...

        def _check_fitted(self) -> None: ...

        def decide(self, question: str) -> GateDecision: ...

        def _inputs(
            self,
            questions: list[str],
            drafts: Sequence[str],
            found: Sequence[tuple[Hit, ...]],
            tokens: Any = None,
            certainties: Sequence[str | None] | None = None,
        ) -> tuple[np.ndarray, np.ndarray | None, list[Any]]: ...

        def _with_draft_embedding(self, features: np.ndarray, drafts: Sequence[str]) -> np.ndarray: ...

        def _with_domains(self, features: np.ndarray, values: Sequence[str | None]) -> np.ndarray: ...

    # ------------------------------------------------------------------ state
    def _keep_fit_rows(
        self, features: np.ndarray, embeddings: np.ndarray | None, records: Sequence[OutcomeRecord], metric: str
    ) -> None:
        """Keep the rows a fit learnt from, graded by agreement (``FitRows``), and start
        an empty log (called by the fit)."""
        helps = agreement_helps(records, metric)
        features = np.asarray(features, dtype=np.float64)
        self._fit_rows = FitRows(features, embeddings, helps)
        self._shadow = ShadowLog(features.shape[1], None if embeddings is None else embeddings.shape[1], metric)
        self._fitted_combiner = None

    @property
    def shadow_(self) -> ShadowLog:
        """Every observation since the gate was fitted (fitted state)."""
        self._check_fitted()
        if self._shadow is None:  # loaded from a gate saved before it kept a log
            combiner = self.combiner_
            width = None if combiner.projection is None else len(combiner.projection.mean)
            self._shadow = ShadowLog(len(combiner.feature_names), width)
        return self._shadow

    @property
    def fit_rows_(self) -> FitRows | None:
        """The rows the gate was fitted on (``None``: it keeps none, as the shipped gate)."""
        self._check_fitted()
        return self._fit_rows

    @property
    def learns_online(self) -> bool:
        return True

    def _learning_lock(self) -> threading.Lock:
        lock = self.__dict__.get("_shadow_lock")
        if lock is None:
            lock = self.__dict__.setdefault("_shadow_lock", threading.Lock())
        return lock

    # ------------------------------------------------------------------ observing
    def record_pair(self, decision: GateDecision, answer: str, *, source: Source, probability: float) -> Observation:
        """Log the pair of a decision this gate took: its draft and ``answer``, the
        answer over the passages it checked the draft against (the one served when it
        retrieved, a shadow answer when it did not), observed with ``probability``.
        Learnt from at the next refit (``learn``)."""
        question, draft, passages = self._served(decision)
        entry = pair(question, draft, answer, source, probability, self.shadow_.metric)
        self._log(entry, decision, draft, passages)
        return entry

    def record_decision_feedback(self, decision: GateDecision, correct: bool) -> Feedback:
        """A person's verdict on the answer served for ``decision`` (``gates.shadow``:
        it outranks the question's agreement pairs). Learnt from at the next refit."""
        if not isinstance(decision, GateDecision):
            raise ValueError(f"decision must be a GateDecision, got {type(decision).__name__}")
        retrieved, correct = check_feedback(decision.retrieve, correct)
        question, draft, passages = self._served(decision)
        entry = verdict(question, draft, retrieved, correct, self.shadow_.wrong_with_retrieval(question))
        self._log(entry, decision, draft, passages)
        logger.debug("%s verdict: %s", self.name, entry)
        return entry.feedback()

    def record_feedback(self, question: str, retrieved: bool, correct: bool) -> Feedback:
        """A verdict on an answer to ``question``: the gate drafts and retrieves again
        to read it (one LLM call; ``record_decision_feedback`` reuses a decision's)."""
        self._check_fitted()
        retrieved, correct = check_feedback(retrieved, correct)
        decision = self.decide(check_question(question))
        return self.record_decision_feedback(_as_route(decision, retrieved), correct)

    def _served(self, decision: GateDecision) -> tuple[str, str, tuple[Hit, ...]]:
        """The question, draft and passages of a decision, or why it teaches nothing."""
        self._check_fitted()
        if self.logprob_features:
            raise FeedbackNotSupportedError(
                f"{self.name}: a gate that reads the draft's log-probabilities cannot learn from served decisions "
                "(a decision does not keep them)"
            )
        if decision.question is None or decision.answer_without_retrieval is None or decision.passages is None:
            raise FeedbackNotSupportedError(
                f"{self.name}: the decision holds no question, draft or passages (a fallback decision): "
                "there is nothing to learn from"
            )
        return decision.question, decision.answer_without_retrieval, decision.passages

    def _log(self, entry: Observation, decision: GateDecision, draft: str, passages: tuple[Hit, ...]) -> None:
        """Log ``entry`` with the combiner's row of its decision's question, draft and
        passages, as the decision read them (the certainty stated with a self-report
        draft, its draft's embedding and its domain included)."""
        assert decision.question is not None  # _served refuses a decision without one
        certainty = decision.details.get("certainty")
        features, embeddings, _ = self._inputs(
            [decision.question], [draft], [passages], certainties=[certainty if isinstance(certainty, str) else None]
        )
        features = self._with_draft_embedding(features, [draft])
        if self.domain_field is not None:
            features = self._with_domains(features, [self.domain])
        self.shadow_.append(entry, features[0], None if embeddings is None else embeddings[0])

    # ------------------------------------------------------------------ learning
    def learn(self, every: int) -> bool:
        """Refit once ``every`` observations arrived since the last refit (``refit_observations``);
        whether it refitted."""
        if every < 1:
            raise ValueError(f"every must be >= 1, got {every}")
        log = self.shadow_
        if len(log) - log.learned < every:
            return False
        return self.refit_observations()

    def refit_observations(self) -> bool:
        """Refit the combiner now on the fit's rows and every observation logged
        (``gates.shadow.observations.refit``); whether it refitted (a gate without fit rows waits
        for enough observations)."""
        with self._learning_lock():
            return self._refit()

    def _refit(self) -> bool:
        log = self.shadow_
        entries, features, embeddings = log.rows()
        fitted = self._fitted_combiner or (self.combiner_, float(self._retrieve_above or 0.0))
        done = refit(fitted[0], self._fit_rows, entries, features, embeddings, C=self.C)
        if done is None:
            if not any(e.helps is not None for e in entries):
                self._restore_fitted()
            logger.info("%s: %d observations, too few to refit on", self.name, len(entries))
            return False
        self._fitted_combiner = fitted
        self._combiner, self._retrieve_above = done.combiner, done.threshold
        log.learned, log.refits = len(entries), log.refits + 1
        if self._calibration is not None:
            logger.warning("%s refitted: its calibration was made on the previous combiner's scores", self.name)
        logger.info(
            "%s refitted on %d fit rows and %d of %d observations", self.name, done.fit_rows, done.used, len(entries)
        )
        return True

    def _restore_fitted(self) -> None:
        """The combiner and threshold the fit made, back in place."""
        if self._fitted_combiner is not None:
            self._combiner, self._retrieve_above = self._fitted_combiner
            self._fitted_combiner = None

    def withdraw_observation(self, entry: Observation) -> None:
        """Take one observation back (``record_pair`` or a verdict returned it): it
        leaves the log and, if the combiner had learnt from it, the combiner is refitted
        without it (the fitted one when nothing is left to learn from).

        Raises:
            ValueError: the log holds no such observation.
        """
        with self._learning_lock():
            learnt = self.shadow_.remove(entry)
            if learnt:
                if self.shadow_.learned == 0:
                    self._restore_fitted()
                else:
                    self._refit()
        logger.info("%s observation withdrawn: %s", self.name, entry)

    def withdraw_feedback(self, entry: Feedback) -> None:
        """Take back a verdict ``record_decision_feedback`` returned (``withdraw_observation``)."""
        if not isinstance(entry, Feedback):
            raise TypeError(f"expected the Feedback record_feedback returned, got {type(entry).__name__}")
        self._check_fitted()
        found = next(
            (e for e in reversed(self.shadow_.entries()) if e.source == "verdict" and e.feedback() == entry), None
        )
        if found is None:
            raise ValueError(f"the gate holds no verdict {entry!r}")
        self.withdraw_observation(found)

    def forget_observations(self) -> None:
        """Back to the combiner the fit made, with an empty log."""
        with self._learning_lock():
            self._restore_fitted()
            log = self.shadow_
            self._shadow = ShadowLog(log.n_features, log.width, log.metric)

    # ------------------------------------------------------------------ persistence
    def _save_learning(self, directory: Path) -> dict[str, Any]:
        """Write the fit rows, the log and (once changed) the fitted combiner; their JSON state."""
        state: dict[str, Any] = {}
        if self._fit_rows is not None:
            state["fit_rows"] = self._fit_rows.save(directory)
        if self._shadow is not None and (len(self._shadow) or self._shadow.refits):
            state["shadow"] = self._shadow.save(directory)
        if self._fitted_combiner is not None:
            combiner, threshold = self._fitted_combiner
            (directory / FITTED_FOLDER).mkdir()
            config = {"combiner": KIND, "library_versions": library_versions()}
            write_directory(directory / FITTED_FOLDER, config, combiner.write_files)
            state["fitted"] = {"folder": FITTED_FOLDER, "retrieve_above": threshold}
        return state

    def _load_learning(self, directory: Path, state: dict[str, Any]) -> None:
        """Read what ``_save_learning`` wrote (nothing of it for a gate saved before it was kept)."""
        combiner = self.combiner_
        width = None if combiner.projection is None else len(combiner.projection.mean)
        n = len(combiner.feature_names)
        self._fit_rows = None if "fit_rows" not in state else FitRows.load(directory, state["fit_rows"], n, width)
        self._shadow = None if "shadow" not in state else ShadowLog.load(directory, state["shadow"], n, width)
        self._fitted_combiner = None
        fitted = state.get("fitted")
        if fitted is not None:
            threshold = fitted.get("retrieve_above") if isinstance(fitted, dict) else None
            if fitted != {"folder": FITTED_FOLDER, "retrieve_above": threshold} or not isinstance(threshold, float):
                raise GateLoadError(f"{directory}: field 'state.fitted' is malformed")
            folder = directory / FITTED_FOLDER
            config = read_config(folder)
            if config_field(config, "combiner", str) != KIND:
                raise GateLoadError(f"{folder}: field 'combiner' is not {KIND!r}")
            saved = FeatureCombiner.from_files(folder, config_field(config, "state", dict), combiner.feature_names)
            self._fitted_combiner = (saved, threshold)


def _as_route(decision: GateDecision, retrieved: bool) -> GateDecision:
    """``decision`` as served by the route the verdict names (``retrieved``)."""
    return decision if decision.retrieve == retrieved else replace(decision, retrieve=retrieved)
