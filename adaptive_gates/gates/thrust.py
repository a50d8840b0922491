"""Thrust (Zhao et al., NeurIPS 2023), SPEC §2: is the query close to what the LM knows?

The fitting queries of a task are clustered in the LM's representation space; a new
query feels the "thrust" of those clusters, like gravity: each cluster pulls with its
size over the squared distance. A strong pull means the query resembles what the
model has seen and handles, so it answers directly; a weak pull means retrieve.

Paper's form (default): ``K = max(ceil(|D|^(1/4)), 3)`` clusters per class and the
``1/(N·K)`` factor. Authors' code form, behind options: ``n_clusters_rule="floor"``
and ``scale="code"`` (no factor; it rescales every score alike, so it moves the
threshold's value but never a decision at a percentile threshold). Our additions:
K clamped to the number of distinct points, an epsilon guard for a query on a
centroid, per-class evidence in every decision, cross-fitted fitting scores for the
percentile thresholds, and levels recorded as calibrations.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path
from typing import Any, ClassVar, Literal, Self, get_args

import numpy as np

from ..errors import GateLoadError
from ..models.protocols import check_vectors
from ..models.representers import Representer, describe, rebuild_embedded
from ..persistence.saved_format import check_saved_backend, load_array, save_array
from ..records.validation import check_questions
from .base.constraints import Integer, OneOf
from .base.given_vectors import DecidesFromVectors, given_or
from .base.percentile import FitPercentileGate, cross_fit

logger = logging.getLogger(__name__)

ClusterRule = Literal["ceil", "floor"]
Scale = Literal["paper", "code"]
LevelScores = Literal["cross_fitted", "in_sample"]

#: Distances below this count as this (absolute, in representation units; hidden
#: states have norms of tens to hundreds, unit-norm embeddings of 1). A query on a
#: centroid gets the finite pull |C|/EPSILON² from it.
EPSILON = 1e-6
#: The dummy class of generation/QA tasks (N = 1).
SINGLE_CLASS = "all"
#: Query-centroid pairs closer than sqrt(NEAR) of their norms are computed from their
#: difference: the fast expanded form would lose up to ~1e-16/NEAR of its precision.
NEAR = 1e-6


def n_clusters(n_samples: int, rule: ClusterRule = "ceil") -> int:
    """The paper's cluster count ``max(ceil(n^(1/4)), 3)`` (``rule="floor"``: the
    authors' code), computed with integer roots so 16 and 81 are exact."""
    if isinstance(n_samples, bool) or not isinstance(n_samples, int) or n_samples < 1:
        raise ValueError(f"n_samples must be a positive int, got {n_samples!r}")
    if rule not in ("ceil", "floor"):
        raise ValueError(f"rule must be 'ceil' or 'floor', got {rule!r}")
    root = math.isqrt(math.isqrt(n_samples))  # floor(n^(1/4))
    if rule == "ceil" and root**4 < n_samples:
        root += 1
    return max(root, 3)


def cluster_points(points: np.ndarray, k: int, *, n_init: int, random_state: int) -> tuple[np.ndarray, np.ndarray]:
    """k-means centroids and sizes of one class, with ``k`` clamped to the number of
    distinct points (fewer samples than clusters, duplicates, a single point)."""
    distinct = len(np.unique(points, axis=0))
    if distinct < k:
        logger.warning("%d distinct points cannot form %d clusters; using %d", distinct, k, distinct)
        k = distinct
    if k == 1:
        return points.mean(axis=0, keepdims=True), np.array([len(points)], dtype=np.int64)
    from sklearn.cluster import KMeans

    kmeans = KMeans(n_clusters=k, n_init=n_init, random_state=random_state).fit(points)
    return kmeans.cluster_centers_.astype(np.float64), np.bincount(kmeans.labels_, minlength=k).astype(np.int64)


def thrust_vectors(
    queries: np.ndarray, centroids: np.ndarray, sizes: np.ndarray, counts: Sequence[int]
) -> tuple[np.ndarray, np.ndarray]:
    """The unscaled thrust of each class on each query, ``Σ_k |C_k| / ||d_k||² ·
    d_k / ||d_k||`` over the class's centroids (d_k = m_k − q), shape (b, N, dim);
    and every query-centroid distance ``||d_k||``, shape (b, C).

    Centroids are grouped by class, ``counts[l]`` of class l. The work is two matrix
    products: ``||d||² = ||m||² + ||q||² − 2 m·q`` and ``Σ w_k d_k = Σ w_k m_k −
    (Σ w_k) q``. Both lose precision when a query nearly coincides with a centroid
    (``||d||² ≤ NEAR·(||m||² + ||q||²)``), so those pairs are recomputed from the
    difference itself: a query on a centroid gives exactly d = 0, whose term keeps
    its magnitude ``|C|/EPSILON²`` and, a zero vector having no direction, points
    along the first axis.
    """
    qq = np.einsum("bd,bd->b", queries, queries)[:, None]
    mm = np.einsum("cd,cd->c", centroids, centroids)[None, :]
    r2 = np.maximum(qq + mm - 2.0 * (queries @ centroids.T), 0.0)
    near = r2 <= NEAR * (qq + mm)
    rows, cols = np.nonzero(near) if near.any() else (None, None)
    if rows is not None:
        exact = centroids[cols] - queries[rows]  # (pairs, dim)
        r2[rows, cols] = np.einsum("pd,pd->p", exact, exact)
    r = np.sqrt(r2)
    pull = sizes / np.maximum(r, EPSILON) ** 2
    weight = pull / np.where(r == 0.0, 1.0, r)  # on d_k
    far_weight = np.where(near, 0.0, weight) if rows is not None else weight
    vectors = np.empty((len(queries), len(counts), queries.shape[1]), dtype=np.float64)
    bounds = np.cumsum([0, *counts])
    for c, (lo, hi) in enumerate(pairwise(bounds)):
        w = far_weight[:, lo:hi]
        vectors[:, c] = w @ centroids[lo:hi] - w.sum(axis=1, keepdims=True) * queries
    if rows is not None:
        class_of = np.repeat(np.arange(len(counts)), counts)[cols]
        np.add.at(vectors, (rows, class_of), weight[rows, cols, None] * exact)
        np.add.at(vectors[:, :, 0], (rows, class_of), np.where(r[rows, cols] == 0.0, pull[rows, cols], 0.0))
    return vectors, r


@dataclass(frozen=True)
class _Clusters:
    """Centroids grouped by class, their sizes, and how many each class has."""

    centroids: np.ndarray  # (C, dim)
    sizes: np.ndarray  # (C,)
    counts: list[int]  # clusters per class; 0 for a class with no points (a cross-fitting fold)


class ThrustGate(FitPercentileGate, DecidesFromVectors):
    """Thrust: retrieve when the query feels little pull from the fitting queries' clusters.

    Native score ``s(q) = || (1/(N·K)) Σ_l Σ_k |C_kl| / ||d_kl||² · d_kl/||d_kl|| ||``
    with ``d_kl = m_kl − f(q)``; retrieve when ``s < λ``. When the per-class counts
    K_l differ (after clamping), N·K is the total number of centroids. Need score:
    ``−s/|D|``. Dividing by the number of fitting queries is a constant per gate, so
    every decision is the paper's, but s grows with |D| and the need scores of gates
    fitted on different numbers of queries (cross-fitting, refits) would not be
    comparable without it. Cost per query after f(q): O(N·K·dim).

    Args:
        representer: what gives f(q); default: the last hidden layer of the embedded
            SmolLM2 (last token, raw question). Any ``Embedder`` (a sentence
            encoder) is the black-box path.
        n_clusters_rule: ``"ceil"`` (paper) or ``"floor"`` (authors' code) in
            ``max(·(|D|^(1/4)), 3)``.
        scale: ``"paper"`` (the 1/(N·K) factor) or ``"code"`` (no factor).
        level_scores: how the fitting queries' scores (``fit_scores_``), whose percentiles are the
            thresholds, are taken. ``"in_sample"`` (paper): against the clusters they
            formed, which flatters them: fitted on 200 queries (MiniLM, NQ and
            HotpotQA questions), the 25/50/75% levels retrieved for 34/58/81% of new
            queries. ``"cross_fitted"`` (default, our addition): each of ``CV_FOLDS``
            folds is scored by the clusters of the other folds: 24/49/75%. Scores of new queries are the same
            either way; only the thresholds differ.
        n_init, random_state: k-means restarts and seed (paper: 10 and 42); the seed
            also draws the cross-fitting folds.
        fallback_retrieve: the decision taken when a question or backend fails.
    """

    name = "thrust"
    backend_params = frozenset({"representer"})
    _fitted_state = ("_fit_scores", "_clusters", "_class_names")
    _renamed_params: ClassVar[dict[str, str]] = {
        "fit_scores": "level_scores"
    }  # beside the fitted fit_scores_, it misled
    _parameter_constraints: ClassVar[dict[str, Any]] = {
        "n_clusters_rule": OneOf(*get_args(ClusterRule)),
        "scale": OneOf(*get_args(Scale)),
        "level_scores": OneOf(*get_args(LevelScores)),
        "n_init": Integer(1),
        "random_state": Integer(),
    }

    def __init__(
        self,
        representer: Representer | None = None,
        *,
        n_clusters_rule: ClusterRule = "ceil",
        scale: Scale = "paper",
        level_scores: LevelScores = "cross_fitted",
        n_init: int = 10,
        random_state: int = 42,
        fallback_retrieve: bool = True,
    ) -> None:
        super().__init__(fallback_retrieve=fallback_retrieve)
        self.representer = representer
        self._default_representer: Representer | None = None
        self.n_clusters_rule = n_clusters_rule
        self.scale = scale
        self.level_scores = level_scores
        self.n_init = n_init
        self.random_state = random_state
        self._clusters: _Clusters | None = None
        self._class_names: list[str] | None = None

    # ------------------------------------------------------------------ backend
    def _representation(self) -> Representer:
        """f(q) in use; the embedded SmolLM2's last hidden layer unless one was given."""
        if self.representer is not None:
            return self.representer
        return self._built_once("_default_representer", _default_representer)

    def _represent(self, questions: list[str]) -> np.ndarray:
        return given_or(questions, self._encode).astype(np.float64)  # a vector decide_vector gave, if any

    def _encode(self, questions: list[str]) -> np.ndarray:
        rep = self._representation()
        return check_vectors(rep.embed(questions), len(questions), rep.model_id)

    def _vector_dimension(self) -> int:
        return int(self._fitted.centroids.shape[1])

    # ------------------------------------------------------------------ fitted state
    @property
    def is_fitted(self) -> bool:
        return self._clusters is not None and super().is_fitted

    @property
    def _fitted(self) -> _Clusters:
        if self._clusters is None:
            raise self._not_fitted()
        return self._clusters

    @property
    def centroids_(self) -> np.ndarray:
        """Cluster centroids m_kl, grouped by class in ``class_names_`` order."""
        return self._fitted.centroids

    @property
    def cluster_sizes_(self) -> np.ndarray:
        """Cluster sizes |C_kl|, aligned with ``centroids_``."""
        return self._fitted.sizes.astype(np.int64)

    @property
    def n_clusters_(self) -> list[int]:
        """Clusters per class (the K rule, clamped to the distinct points)."""
        return list(self._fitted.counts)

    @property
    def class_names_(self) -> list[str]:
        """The classes (``["all"]`` for QA), in order of first appearance."""
        self._check_fitted()
        return list(self._fitted_value(self._class_names))

    # ------------------------------------------------------------------ fitting
    def fit(self, questions: Sequence[str], class_labels: Sequence[str | int] | None = None) -> Self:
        """Cluster the fitting queries (no answers needed; the paper uses ~200).

        ``class_labels`` (classification tasks) cluster each class on its own;
        without them all queries form one class (N = 1).
        """
        clean = check_questions(questions)
        if not clean:
            raise ValueError("Thrust needs at least one fitting question")
        labels = np.array(self._check_class_labels(class_labels, len(clean)), dtype=object)
        names = list(dict.fromkeys(labels))
        vectors = self._represent(clean)
        clusters = self._cluster(vectors, labels, names)
        if self.level_scores == "in_sample" or len(clean) < 2:
            fit_scores = self._need(vectors, clusters)[0]
        else:
            fit_scores = self._cross_fitted_scores(vectors, labels, names)
        self._clusters, self._class_names, self._fit_scores = clusters, names, fit_scores
        logger.info(
            "thrust fitted on %d questions: classes %s with %s clusters, representer %s",
            len(clean),
            names,
            clusters.counts,
            self._representation().model_id,
        )
        return self

    @staticmethod
    def _check_class_labels(class_labels: Sequence[str | int] | None, n: int) -> list[str]:
        if class_labels is None:
            return [SINGLE_CLASS] * n
        if isinstance(class_labels, str) or len(class_labels) != n:
            raise ValueError(f"class_labels must be a sequence of {n} labels, one per question")
        for i, label in enumerate(class_labels):
            if isinstance(label, bool) or not isinstance(label, (str, int)):
                raise ValueError(f"class label {i} must be a str or int, got {label!r}")
        return [str(label) for label in class_labels]

    def _cluster(self, vectors: np.ndarray, labels: np.ndarray, names: list[str]) -> _Clusters:
        centroids, sizes, counts = [], [], []
        for name in names:
            points = vectors[labels == name]
            if len(points) == 0:
                counts.append(0)
                continue
            k = n_clusters(len(points), self.n_clusters_rule)
            class_centroids, class_sizes = cluster_points(points, k, n_init=self.n_init, random_state=self.random_state)
            centroids.append(class_centroids)
            sizes.append(class_sizes)
            counts.append(len(class_sizes))
        return _Clusters(np.concatenate(centroids), np.concatenate(sizes).astype(np.float64), counts)

    def _cross_fitted_scores(self, vectors: np.ndarray, labels: np.ndarray, names: list[str]) -> np.ndarray:
        """Need scores of each fitting query from clusters of the other folds."""

        def score_fold(kept: np.ndarray, held_out: np.ndarray) -> np.ndarray:
            return self._need(vectors[held_out], self._cluster(vectors[kept], labels[kept], names))[0]

        return cross_fit(len(vectors), self.random_state, score_fold)

    # ------------------------------------------------------------------ scoring
    def _need(self, vectors: np.ndarray, clusters: _Clusters) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        """Need scores −s/|D| (b,), native scores s (b,), per-class thrust (b, N) and
        distances (b, centroids) of ``vectors`` against ``clusters``."""
        s, per_class, distances = self._thrust(vectors, clusters)
        return -s / clusters.sizes.sum(), s, per_class, distances

    def _thrust(self, vectors: np.ndarray, clusters: _Clusters) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Native scores s (b,), per-class thrust (b, N) and distances (b, centroids)."""
        factor = 1.0 / len(clusters.sizes) if self.scale == "paper" else 1.0
        per_class, distances = thrust_vectors(vectors, clusters.centroids, clusters.sizes, clusters.counts)
        per_class *= factor
        total = per_class.sum(axis=1)
        s = np.sqrt(np.einsum("bd,bd->b", total, total))
        return s, np.sqrt(np.einsum("bld,bld->bl", per_class, per_class)), distances

    def _score(self, questions: list[str]) -> tuple[np.ndarray, list[dict[str, Any]]]:
        clusters = self._fitted
        need, s, per_class, distances = self._need(self._represent(questions), clusters)
        first = np.cumsum([0, *clusters.counts[:-1]])
        nearest = distances.argmin(axis=1)
        nearest_class = np.searchsorted(first, nearest, side="right") - 1
        # Plain Python numbers, converted once per batch: the evidence is built per query.
        rows = zip(
            s.tolist(),
            distances[np.arange(len(nearest)), nearest].tolist(),
            nearest_class.tolist(),
            (nearest - first[nearest_class]).tolist(),
            clusters.sizes[nearest].astype(int).tolist(),
            per_class.tolist(),
            np.minimum.reduceat(distances, first, axis=1).tolist(),
        )
        names = self._fitted_value(self._class_names)
        details = [
            {
                "thrust": thrust,
                "nearest_centroid_distance": distance,
                "nearest_cluster": {"class": names[c], "cluster": k, "size": size},
                "classes": [
                    {"class": name, "thrust": t, "nearest_distance": d}
                    for name, t, d in zip(names, class_thrust, class_distance)
                ],
            }
            for thrust, distance, c, k, size, class_thrust, class_distance in rows
        ]
        return need, details

    # ------------------------------------------------------------------ persistence
    def _save_state(self, directory: Path) -> dict[str, Any]:
        clusters = self._fitted
        save_array(directory, "centroids.npy", clusters.centroids)
        save_array(directory, "sizes.npy", self.cluster_sizes_)
        save_array(directory, "fit_scores.npy", self.fit_scores_)
        return {
            "representer": describe(self._representation()),
            "class_names": self._class_names,
            "clusters_per_class": clusters.counts,
        }

    def _load_state(self, directory: Path, state: dict[str, Any]) -> None:
        record = state.get("representer")
        if (
            not isinstance(record, dict)
            or not isinstance(record.get("id"), str)
            or not isinstance(record.get("dimension"), int)
        ):
            raise GateLoadError(f"{directory}: field 'state.representer' is missing or malformed")
        self._use_saved_representer(directory, record)
        names, counts = state.get("class_names"), state.get("clusters_per_class")
        if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
            raise GateLoadError(f"{directory}: field 'state.class_names' must be a non-empty list of strings")
        if (
            not isinstance(counts, list)
            or len(counts) != len(names)
            or not all(isinstance(c, int) and not isinstance(c, bool) and c >= 1 for c in counts)
        ):
            raise GateLoadError(f"{directory}: field 'state.clusters_per_class' must hold one positive int per class")
        n_centroids = sum(counts)
        centroids = load_array(directory, "centroids.npy").astype(np.float64)
        if centroids.shape != (n_centroids, record["dimension"]) or not np.all(np.isfinite(centroids)):
            raise GateLoadError(
                f"{directory}: file 'centroids.npy' has shape {centroids.shape}, "
                f"expected ({n_centroids}, {record['dimension']}) finite values"
            )
        sizes = load_array(directory, "sizes.npy")
        if sizes.shape != (n_centroids,) or sizes.dtype.kind not in "iu" or np.any(sizes < 1):
            raise GateLoadError(f"{directory}: file 'sizes.npy' must hold {n_centroids} positive ints")
        self._fit_scores = self._load_fit_scores(directory, int(sizes.sum()))
        self._clusters = _Clusters(centroids, sizes.astype(np.float64), counts)
        self._class_names = names

    def _use_saved_representer(self, directory: Path, record: dict[str, Any]) -> None:
        """Rebuild the embedded representer the gate was saved with (it becomes the
        ``representer`` parameter, so a clone represents alike), or check that the
        given one matches it."""
        if self.representer is None:
            try:
                rebuilt = rebuild_embedded(record)
            except (KeyError, TypeError, ValueError) as exc:
                raise GateLoadError(f"{directory}: field 'state.representer.settings' is malformed ({exc})") from None
            if rebuilt is None:
                raise GateLoadError(
                    f"{directory}: this gate was saved with representer {record['id']!r}; "
                    "pass representer= with that model to load it"
                )
            self.representer = rebuilt
        rep = self.representer
        check_saved_backend(directory, "state.representer.id", record["id"], rep.model_id, "representer")
        check_saved_backend(
            directory, "state.representer.dimension", record["dimension"], rep.dimension, "representer's dimension"
        )


def _default_representer() -> Representer:
    from ..models.representers import LMHiddenStateRepresenter  # loads the LM: only when the gate needs it

    return LMHiddenStateRepresenter()
