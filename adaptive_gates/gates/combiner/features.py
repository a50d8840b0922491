"""A combiner of named feature columns (and, optionally, an embedding reduced by PCA)
into one need score, learned from outcome records: a strongly regularised logistic
regression, boosted trees, or both rank-averaged.

Why both: the logistic heads (``stacking``'s, over standardised columns) are steady on
a few hundred rows and add evidence linearly; shallow boosted trees pick up what is
not linear (a hedge matters only without agreement, a "when" mismatch only for
drafts that are not dates). Their scores live on different scales, so the blend
averages each model's rank: a new row's score is placed among the model's own
scores on the training rows (its mid-rank there, in [0, 1]), and the two places are
averaged. The placement is fixed at fit, so a row's score never depends on which
other rows are scored with it.

Targets, as ``stacking``'s: ``"gain"`` (two heads per model, P(correct with
retrieval) − P(correct without)) or ``"helps"`` (one head, P(retrieval helps)). The
benchmark ``benchmarks/draft_check.py`` compares them and the models: the defaults
(rank-average, "gain") are the best it found when fitted on all six of its data sets
at once. On a data set never seen in fitting, the logistic heads alone did better
(``model="logistic"``); on one data set's few hundred rows, fewer columns did (the
question features and the draft's agreement, logistic). "gain" beat "helps" in the
mean of every protocol.

The embedding block (e.g. the question's MiniLM vector) is reduced to ``embedding_dims``
principal components learned in ``fit`` from the training rows only, so that a
held-out row's projection never saw it; the components become extra columns.

Rows may teach some heads only (an outcome of NaN for the others, as a feedback
observation shows one answer): the logistic heads and the trees of a head each learn
from the rows that hold its outcome. ``refit_feature_combiner`` fits the models again
on the rows of a fit plus such rows, keeping what was learned from the fit's rows
alone (the projection, the standardisation, the blend's reference scores).

Saved as a directory of JSON and ``.npy`` arrays (``persistence``: checksums, atomic
replacement), the trees as node tables (``boosted_trees``), never a pickle. A load
refuses a combiner saved for other feature names, and arrays of the wrong shape or
kind, naming the field or file. scikit-learn is imported only by the fits.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np

from ...errors import GateLoadError
from ...persistence.directory_swap import reading
from ...persistence.saved_format import (
    config_field,
    library_versions,
    load_array,
    read_config,
    save_array,
    save_directory,
    write_directory,
)
from ..base.calibration import threshold_for_rate
from .logistic import (
    HEADS,
    TARGETS,
    Combiner,
    Target,
    fit_combiner,
    head_outcomes,
    row_weights,
    standardisation,
    weighted_rows,
)
from .trees import TreeEnsemble

Model = Literal["blend", "logistic", "boosted"]
MODELS = ("blend", "logistic", "boosted")
#: What ``config.json`` of a saved combiner names itself.
KIND = "feature-combiner"


@dataclass(frozen=True)
class Projection:
    """Principal components of an embedding block: ``(embedding − mean) @ components.T``."""

    mean: np.ndarray
    components: np.ndarray

    def apply(self, embeddings: np.ndarray) -> np.ndarray:
        """The rows' coordinates on the components."""
        return (np.asarray(embeddings, dtype=np.float64) - self.mean) @ self.components.T


@dataclass(frozen=True)
class BoostingParams:
    """The boosted trees' settings (``HistGradientBoostingClassifier``'s names): shallow
    trees, a slow rate and large leaves, for a few hundred noisy rows."""

    max_depth: int = 3
    learning_rate: float = 0.05
    max_iter: int = 100
    min_samples_leaf: int = 20
    l2_regularization: float = 1.0


@dataclass(frozen=True)
class FeatureCombiner:
    """A fitted combiner (see the module). ``boosted`` holds a tree ensemble per head
    (empty for ``model="logistic"``), ``logistic`` the logistic heads (``None`` for
    ``model="boosted"``); ``references`` the sorted training scores of each model
    that ``"blend"`` ranks new scores among."""

    feature_names: tuple[str, ...]
    target: Target
    model: Model
    projection: Projection | None
    logistic: Combiner | None
    boosted: dict[str, TreeEnsemble]
    references: dict[str, np.ndarray]

    @property
    def n_inputs(self) -> int:
        """The columns the models see: the features, then the embedding's components."""
        return len(self.feature_names) + (0 if self.projection is None else len(self.projection.components))

    def inputs(self, features: np.ndarray, embeddings: np.ndarray | None = None) -> np.ndarray:
        """The models' input rows: ``features`` (columns ``feature_names``) and, if the
        combiner has a projection, the projected ``embeddings`` (one row each)."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != len(self.feature_names):
            raise ValueError(f"expected rows of {len(self.feature_names)} features, got shape {x.shape}")
        if self.projection is None:
            if embeddings is not None:
                raise ValueError("this combiner was fitted without embeddings; pass none")
            return x
        width = len(self.projection.mean)
        e = None if embeddings is None else np.asarray(embeddings, dtype=np.float64)
        if e is None or e.shape != (len(x), width):
            raise ValueError(f"expected {len(x)} embeddings of width {width}, got {None if e is None else e.shape}")
        return np.hstack([x, self.projection.apply(e)])

    def model_scores(self, features: np.ndarray, embeddings: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Each fitted model's need score of each row (``"logistic"``, ``"boosted"``)."""
        z = self.inputs(features, embeddings)
        out = {}
        if self.logistic is not None:
            out["logistic"] = self.logistic.score(z)
        if self.boosted:
            p = {name: trees.probability(z) for name, trees in self.boosted.items()}
            names = HEADS[self.target]
            out["boosted"] = p[names[0]] - p[names[1]] if len(names) == 2 else p[names[0]]
        return out

    def head_probabilities(self, features: np.ndarray, embeddings: np.ndarray | None = None) -> dict[str, np.ndarray]:
        """Each head's probability of each row (``stacking.HEADS``): the logistic
        heads' where the combiner has them, else the boosted trees'."""
        z = self.inputs(features, embeddings)
        if self.logistic is not None:
            return self.logistic.head_probabilities(z)
        return {name: trees.probability(z) for name, trees in self.boosted.items()}

    def score(self, features: np.ndarray, embeddings: np.ndarray | None = None) -> np.ndarray:
        """Need scores (higher: retrieve first). ``"blend"``: the mean of each model's
        mid-rank among its training scores, in [0, 1]."""
        scores = self.model_scores(features, embeddings)
        if self.model != "blend":
            return scores[self.model]
        return np.mean([_mid_rank(self.references[name], s) for name, s in scores.items()], axis=0)

    # ------------------------------------------------------------------ persistence
    def write_files(self, directory: Path) -> dict[str, Any]:
        """Write the arrays into ``directory``; return the JSON part (for a holder that
        keeps the combiner in its own saved directory)."""
        state: dict[str, Any] = {
            "feature_names": list(self.feature_names),
            "target": self.target,
            "model": self.model,
            "projection": None,
            "logistic": None if self.logistic is None else self.logistic.save(directory),
            "boosted": {name: trees.save(directory, f"boosted_{name}") for name, trees in self.boosted.items()},
            "references": sorted(self.references),
        }
        if self.projection is not None:
            save_array(directory, "projection_mean.npy", self.projection.mean)
            save_array(directory, "projection_components.npy", self.projection.components)
            state["projection"] = {"dims": len(self.projection.components), "width": len(self.projection.mean)}
        for name, reference in self.references.items():
            save_array(directory, f"reference_{name}.npy", reference)
        return state

    @classmethod
    def from_files(cls, directory: Path, state: Any, feature_names: Sequence[str]) -> FeatureCombiner:
        """Read what ``write_files`` wrote, for a caller whose columns are ``feature_names``."""
        if not isinstance(state, dict):
            raise GateLoadError(f"{directory}: field 'state' is missing or malformed")
        saved_names = state.get("feature_names")
        if saved_names != list(feature_names):
            raise GateLoadError(
                f"{directory}: field 'state.feature_names' is {saved_names!r}, but the features given are "
                f"{list(feature_names)!r}; a combiner scores only the columns it was fitted on"
            )
        target, model = state.get("target"), state.get("model")
        if target not in TARGETS:
            raise GateLoadError(f"{directory}: field 'state.target' must be one of {TARGETS}, got {target!r}")
        if model not in MODELS:
            raise GateLoadError(f"{directory}: field 'state.model' must be one of {MODELS}, got {model!r}")
        projection = _load_projection(directory, state.get("projection"))
        n_inputs = len(feature_names) + (0 if projection is None else len(projection.components))
        logistic = None
        if model != "boosted":
            logistic = Combiner.load(directory, state.get("logistic"), n_inputs)
            if logistic.target != target:
                raise GateLoadError(f"{directory}: field 'state.logistic.target' is not 'state.target' ({target!r})")
        boosted_state = state.get("boosted")
        wanted = set() if model == "logistic" else set(HEADS[target])
        if not isinstance(boosted_state, dict) or set(boosted_state) != wanted:
            raise GateLoadError(f"{directory}: field 'state.boosted' must hold the heads {sorted(wanted)}")
        boosted = {
            name: TreeEnsemble.load(
                directory, boosted_state[name], f"boosted_{name}", n_inputs, f"state.boosted.{name}"
            )
            for name in HEADS[target]
            if name in wanted
        }
        expected = ["boosted", "logistic"] if model == "blend" else []
        if state.get("references") != expected:
            raise GateLoadError(f"{directory}: field 'state.references' must be {expected}")
        references = {name: _load_reference(directory, f"reference_{name}.npy") for name in expected}
        return cls(tuple(feature_names), target, model, projection, logistic, boosted, references)

    def save(self, path: str | Path, *, overwrite: bool = False) -> Path:
        """Save to a directory of JSON and arrays (``persistence.save_directory``)."""
        config = {"combiner": KIND, "library_versions": library_versions()}
        return save_directory(
            path, lambda directory: write_directory(directory, config, self.write_files), overwrite=overwrite
        )

    @classmethod
    def load(cls, path: str | Path, feature_names: Sequence[str]) -> FeatureCombiner:
        """Load a combiner saved by ``save``, for a caller whose columns are ``feature_names``."""
        path = Path(path)
        with reading(path):
            config = read_config(path)
            kind = config_field(config, "combiner", str)
            if kind != KIND:
                raise GateLoadError(f"{path}: field 'combiner' is {kind!r}, expected {KIND!r}")
            return cls.from_files(path, config_field(config, "state", dict), feature_names)


def _mid_rank(reference: np.ndarray, scores: np.ndarray) -> np.ndarray:
    """Each score's mid-rank among the sorted ``reference`` scores, in [0, 1]."""
    below = np.searchsorted(reference, scores, side="left")
    at_or_below = np.searchsorted(reference, scores, side="right")
    return (below + at_or_below) / (2.0 * len(reference))


def _load_projection(directory: Path, state: Any) -> Projection | None:
    if state is None:
        return None
    dims, width = (state.get("dims"), state.get("width")) if isinstance(state, dict) else (None, None)
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (dims, width)):
        raise GateLoadError(f"{directory}: field 'state.projection' must give positive 'dims' and 'width'")
    mean = load_array(directory, "projection_mean.npy")
    components = load_array(directory, "projection_components.npy")
    for name, array, shape in (
        ("projection_mean.npy", mean, (width,)),
        ("projection_components.npy", components, (dims, width)),
    ):
        if array.shape != shape or array.dtype.kind != "f" or not np.all(np.isfinite(array)):
            raise GateLoadError(f"{directory}: file {name!r} must hold {shape} finite floats, got {array.shape}")
    return Projection(mean.astype(np.float64), components.astype(np.float64))


def _load_reference(directory: Path, name: str) -> np.ndarray:
    reference = load_array(directory, name)
    if (
        reference.ndim != 1
        or reference.size == 0
        or reference.dtype.kind != "f"
        or not np.all(np.isfinite(reference))
        or np.any(np.diff(reference) < 0)
    ):
        raise GateLoadError(f"{directory}: file {name!r} must hold sorted finite scores, got {reference.shape}")
    return reference.astype(np.float64)


def _fit_trees(
    z: np.ndarray, y: np.ndarray, params: BoostingParams, seed: int, sample_weight: np.ndarray | None = None
) -> TreeEnsemble:
    """Boosted trees for outcomes ``y`` in [0, 1]: a fractional outcome enters as a
    positive row weighted by its value and a negative row weighted by the rest; a row
    whose outcome is NaN does not teach these trees; ``sample_weight`` scales each
    row's part (default 1 each). When all weights are 1 (0/1 outcomes, no row weights)
    none are passed: scikit-learn bins weighted rows by weighted percentiles, about a
    hundred times slower."""
    from sklearn.ensemble import HistGradientBoostingClassifier

    rows, labels, weights = weighted_rows(z, y, sample_weight, "boosted trees: the outcome")
    model = HistGradientBoostingClassifier(
        max_depth=params.max_depth,
        learning_rate=params.learning_rate,
        max_iter=params.max_iter,
        min_samples_leaf=params.min_samples_leaf,
        l2_regularization=params.l2_regularization,
        early_stopping=False,
        random_state=seed,
    )
    model.fit(rows, labels, sample_weight=None if np.all(weights == 1) else weights)
    return TreeEnsemble.from_sklearn(model, z.shape[1])


def fit_feature_combiner(
    features: np.ndarray,
    feature_names: Sequence[str],
    a: np.ndarray,
    b: np.ndarray,
    *,
    embeddings: np.ndarray | None = None,
    embedding_dims: int = 32,
    target: Target = "gain",
    model: Model = "blend",
    C: float = 0.05,
    boosting: BoostingParams = BoostingParams(),  # frozen: one shared default is safe
    seed: int = 0,
    sample_weight: np.ndarray | None = None,
) -> FeatureCombiner:
    """Fit a combiner on feature rows (columns ``feature_names``), the outcomes without
    (``a``) and with (``b``) retrieval of each row, and optionally an embedding per row
    (reduced to ``embedding_dims`` components learned here). ``C``: the logistic
    heads' inverse regularisation strength. An outcome may be NaN (not observed): the
    row then teaches no head that needs it. ``sample_weight``: how much each row counts
    in the models (default 1 each); the projection, the standardisation and the blend's
    reference scores treat the rows alike."""
    x = np.asarray(features, dtype=np.float64)
    names = tuple(feature_names)
    if x.ndim != 2 or x.shape[1] != len(names) or len(names) != len(set(names)):
        raise ValueError(f"expected rows of {len(names)} distinctly named features, got shape {x.shape}")
    if target not in TARGETS or model not in MODELS:
        raise ValueError(f"target must be one of {TARGETS} and model one of {MODELS}, got {target!r}, {model!r}")
    outcomes = head_outcomes(np.asarray(a), np.asarray(b), target)
    if any(len(y) != len(x) for y in outcomes.values()):
        raise ValueError(f"got {len(x)} feature rows and {len(a)} outcomes")
    projection = None
    if embeddings is not None:
        from sklearn.decomposition import PCA

        e = np.asarray(embeddings, dtype=np.float64)
        if e.ndim != 2 or len(e) != len(x):
            raise ValueError(f"expected {len(x)} rows of embeddings, got shape {e.shape}")
        pca = PCA(n_components=min(embedding_dims, *e.shape), random_state=seed).fit(e)
        projection = Projection(pca.mean_.astype(np.float64), pca.components_.astype(np.float64))
    unfitted = FeatureCombiner(names, target, model, projection, None, {}, {})
    return _fit_models(unfitted, x, embeddings, outcomes, len(x), C, boosting, seed, sample_weight)


def refit_feature_combiner(
    combiner: FeatureCombiner,
    features: np.ndarray,
    outcomes: dict[str, np.ndarray],
    *,
    embeddings: np.ndarray | None = None,
    rows: int,
    C: float = 0.05,
    boosting: BoostingParams = BoostingParams(),  # frozen: one shared default is safe
    seed: int = 0,
    sample_weight: np.ndarray | None = None,
    target: Target | None = None,
) -> FeatureCombiner:
    """``combiner``'s models fitted again on more rows: the first ``rows`` rows of
    ``features`` (and ``embeddings``) are those it was fitted on, the rest new ones,
    e.g. feedback; ``outcomes`` gives each head's outcome per row (``head_outcomes``,
    NaN where a row does not teach that head). The embedding's projection stays as
    fitted, and the logistic heads' standardisation and the blend's reference scores
    come from the first ``rows`` rows only: a row that teaches one head leaves the
    other head's logistic regression and trees as they were.

    ``sample_weight``: how much each row counts in the models (default 1 each), e.g.
    the inverse of the chance a new row was observed. ``target``: the target to refit
    on (default: the combiner's), e.g. ``"helps"`` for rows graded by agreement, where
    correctness with retrieval is constant."""
    x = np.asarray(features, dtype=np.float64)
    if not 0 < rows <= len(x):
        raise ValueError(f"rows must count the first of the {len(x)} rows the combiner was fitted on, got {rows}")
    target = combiner.target if target is None else target
    if target not in TARGETS:
        raise ValueError(f"target must be one of {TARGETS}, got {target!r}")
    if set(outcomes) != set(HEADS[target]):
        raise ValueError(f"target {target!r} has the heads {HEADS[target]}, got {sorted(outcomes)}")
    if any(len(y) != len(x) for y in outcomes.values()):
        raise ValueError(f"got {len(x)} feature rows and {[len(y) for y in outcomes.values()]} outcomes")
    names, model, projection = combiner.feature_names, combiner.model, combiner.projection
    unfitted = FeatureCombiner(names, target, model, projection, None, {}, {})
    return _fit_models(unfitted, x, embeddings, outcomes, rows, C, boosting, seed, sample_weight)


def _fit_models(
    unfitted: FeatureCombiner,
    x: np.ndarray,
    embeddings: np.ndarray | None,
    outcomes: dict[str, np.ndarray],
    rows: int,
    C: float,
    boosting: BoostingParams,
    seed: int,
    sample_weight: np.ndarray | None = None,
) -> FeatureCombiner:
    """``unfitted``'s models (its projection already set) fitted on all rows, weighted
    by ``sample_weight``; the standardisation and the blend's references from the
    first ``rows``."""
    names, target, model, projection = unfitted.feature_names, unfitted.target, unfitted.model, unfitted.projection
    z = unfitted.inputs(x, embeddings)
    weights = None if sample_weight is None else row_weights(sample_weight, len(z))
    outcomes = {name: np.asarray(y, dtype=np.float64) for name, y in outcomes.items()}
    scaling = standardisation(z[:rows])
    logistic = None if model == "boosted" else fit_combiner(z, outcomes, target, C, scaling, weights)
    boosted = (
        {} if model == "logistic" else {name: _fit_trees(z, y, boosting, seed, weights) for name, y in outcomes.items()}
    )
    fitted = FeatureCombiner(names, target, model, projection, logistic, boosted, {})
    if model != "blend":
        return fitted
    first = None if embeddings is None else np.asarray(embeddings)[:rows]
    references = {name: np.sort(s) for name, s in fitted.model_scores(x[:rows], first).items()}
    return FeatureCombiner(names, target, model, projection, logistic, boosted, references)


def default_threshold(
    combiner: FeatureCombiner, features: np.ndarray, embeddings: np.ndarray | None, help_rate: float
) -> float:
    """The threshold a gate over ``combiner`` decides by until it is calibrated, placed
    among its scores of its training rows (``features``, ``embeddings``).

    With the logistic heads alone the need score is an expected gain (retrieve iff > 0)
    or P(retrieval helps) (retrieve iff above its training rate: the logistic heads'
    base rate, else ``help_rate``). A blend is a rank and trees' probabilities are not
    calibrated as the logistic heads' are, so for ``"blend"`` and ``"boosted"`` it is
    the score at which the gate retrieves on as many training rows as that rule applied
    to the reference model would: the logistic heads for a blend, the trees themselves
    for ``"boosted"``.
    """
    cut = 0.0
    if combiner.target == "helps":
        cut = combiner.logistic.base_rate if combiner.logistic is not None else help_rate
    if combiner.model == "logistic":
        return cut
    reference = combiner.model_scores(features, embeddings)["logistic" if combiner.model == "blend" else "boosted"]
    share = float(np.mean(reference > cut))
    return float(threshold_for_rate(combiner.score(features, embeddings), share).threshold)
