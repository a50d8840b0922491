"""The stacked gate: one combiner over the need scores of several gates and cheap
features of the question's wording.

Every published signal alone captures little of what a perfect gate would; they err
on different questions. The stacked gate fits member gates (default: SKR-kNN and the
balanced SKR classifier on MiniLM, Thrust on MiniLM, IAPEK-BM25 and the popularity
gate: no LLM) and a logistic-regression combiner (``stacked_combiner``) on their
scores plus ``question_features``, learning from *every* outcome row, including the
ones SKR drops because both answers were wrong.

Leakage: a member scores its own training questions better than new ones (a kNN
memory finds the question itself), so a combiner fitted on in-sample member scores
would trust the members too much. The member scores it learns from are cross-fitted
(``cross_fitted_scores``: each row scored by a member fitted on the other folds);
the members that serve are then refitted on all rows.

Persistence: one directory; each member is saved by its own ``save`` into a
subdirectory (``member-<i>-<name>``) whose ``config.json`` digest the stacked gate's
config records, and the combiner's arrays sit next to the config.
"""

from __future__ import annotations

import hashlib
import logging
import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ..data import OutcomeRecord
from ..errors import GateLoadError, NotFittedError
from ..models.cached_embedder import CachedEmbedder
from ..models.protocols import Embedder
from ..persistence import CONFIG_FILE
from ..question_features import FEATURE_NAMES, question_features
from ..selfknowledge import outcome_scores
from .base import Gate
from .bm25_difficulty import BM25DifficultyGate
from .popularity import PopularityGate
from .skr import SKRClassifierGate, SKRKnnGate
from .stacked_combiner import TARGETS, Combiner, Target, fit_combiner
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
    "thrust": MemberSpec(lambda e: ThrustGate(e, fit_scores="in_sample"), "representer"),
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
    from ..evaluation.offline import cross_fitted_scores

    return cross_fitted_scores(lambda: MEMBERS[name].build(encoder), records, metric, folds, seed)


def fit_member(name: str, records: Sequence[OutcomeRecord], metric: str, encoder: Embedder | None) -> Gate:
    """The member fitted on all ``records``: the one that scores served questions."""
    return MEMBERS[name].build(encoder).fit_outcomes(records, metric)


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


class StackedGate(Gate):
    """Retrieve when a combiner of member gates and question features expects it to pay.

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
    _backend_params = frozenset({"embedder"})
    _fitted_state = ("_members", "_combiner")

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
        names = parse_members(members)
        if target not in TARGETS:
            raise ValueError(f"target must be one of {', '.join(TARGETS)}, got {target!r}")
        if not isinstance(features, bool):
            raise ValueError(f"features must be true or false, got {features!r}")
        if not names and not features:
            raise ValueError("a stacked gate needs members, question features, or both")
        if isinstance(C, bool) or not isinstance(C, (int, float)) or not 0 < C < math.inf:
            raise ValueError(f"C must be a positive number, got {C!r}")
        if isinstance(folds, bool) or not isinstance(folds, int) or folds < 2:
            raise ValueError(f"folds must be an int >= 2, got {folds!r}")
        if isinstance(seed, bool) or not isinstance(seed, int):
            raise ValueError(f"seed must be an int, got {seed!r}")
        self.embedder = embedder
        self.members = members
        self.target = target
        self.features = features
        self.C = C
        self.folds = folds
        self.seed = seed
        self._names = names
        self._encoder_lock = threading.Lock()
        self._default_encoder: Embedder | None = None
        self._members: list[Gate] | None = None
        self._combiner: Combiner | None = None

    # ------------------------------------------------------------------ state
    @property
    def is_fitted(self) -> bool:
        return self._combiner is not None

    @property
    def members_(self) -> dict[str, Gate]:
        """The fitted member gates by name (those that score served questions)."""
        self._check_fitted()
        return dict(zip(self._names, self._members))

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
    def fit_outcomes(self, records: Sequence[OutcomeRecord], metric: str = "contains") -> "StackedGate":
        """Fit the members and the combiner on outcome records (all of them)."""
        records = list(records)
        if len(records) < 2 * self.folds:
            raise ValueError(f"stacked gate: {len(records)} outcome records are too few for {self.folds}-fold cross-fitting")
        a, b = outcome_scores(records, metric)
        questions = [r.question for r in records]
        encoder = self._encoder()
        # The fold members see each question several times: embed it once.
        fold_encoder = CachedEmbedder(encoder) if encoder is not None else None
        columns = [member_scores(n, records, metric, self.folds, self.seed, fold_encoder) for n in self._names]
        members = [fit_member(n, records, metric, encoder) for n in self._names]
        combiner = fit_combiner(self._features(columns, questions), a, b, self.target, self.C)
        self._members, self._combiner = members, combiner
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

    # ------------------------------------------------------------------ scoring
    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        member_scores = [gate.score(questions) for gate in self._members]
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
        saved = []
        for i, (name, gate) in enumerate(zip(self._names, self._members)):
            sub = f"member-{i}-{name}"
            gate.save(directory / sub)
            saved.append({"name": name, "directory": sub, "config_sha256": _digest(directory / sub / CONFIG_FILE)})
        return {"members": saved, "feature_names": self.feature_names_, "combiner": self.combiner_.save(directory)}

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        if state.get("feature_names") != self.feature_names_:
            raise GateLoadError(
                f"{directory}: field 'state.feature_names' is {state.get('feature_names')!r}, but this version of "
                f"the stacked gate computes {self.feature_names_!r}; fit and save it again"
            )
        saved = state.get("members")
        if not isinstance(saved, list) or [m.get("name") if isinstance(m, dict) else None for m in saved] != list(self._names):
            raise GateLoadError(f"{directory}: field 'state.members' does not list the members {list(self._names)}")
        encoder = self._encoder()
        members = []
        for i, record in enumerate(saved):
            name = record["name"]
            sub = f"member-{i}-{name}"
            if record.get("directory") != sub:
                raise GateLoadError(f"{directory}: field 'state.members' gives member {i} the directory "
                                    f"{record.get('directory')!r}, expected {sub!r}")
            config = directory / sub / CONFIG_FILE
            if not config.is_file():
                raise GateLoadError(f"{directory}: member {name!r} is missing ({sub}/{CONFIG_FILE})")
            if _digest(config) != record.get("config_sha256"):
                raise GateLoadError(f"{directory}: member {name!r} ({sub}) is not the one saved with this gate "
                                    "(its config.json does not match the recorded checksum)")
            backend = MEMBERS[name].backend
            member = Gate.load(directory / sub, **({backend: encoder} if backend else {}))
            if member.name != name:
                raise GateLoadError(f"{directory}: member {i} is a {member.name!r} gate, expected {name!r}")
            members.append(member)
        self._combiner = Combiner.load(directory, state.get("combiner"), len(self.feature_names_))
        self._members = members
