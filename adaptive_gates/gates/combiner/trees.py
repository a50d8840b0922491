"""Gradient-boosted trees as plain arrays: scikit-learn's ``HistGradientBoostingClassifier``
exported node by node and evaluated with numpy, so a saved model is arrays and JSON,
never a pickle, and scoring needs no scikit-learn.

A binary classifier's raw score is its baseline plus one leaf value per tree; each
tree sends a row left when its feature is at most the node's threshold, and a missing
value (NaN) the side the training chose for it. ``TreeEnsemble`` keeps every tree's
nodes in one float64 table (``NODE_COLUMNS``), each tree a run of rows (``offsets``);
child indices count within a tree, and scikit-learn numbers a node's children after
the node itself, which a load checks so that no saved tree can loop.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import GateLoadError
from ...persistence.saved_format import load_array, save_array

#: The columns of the node table, in order.
NODE_COLUMNS = ("feature", "threshold", "left", "right", "is_leaf", "missing_left", "value")
_FEATURE, _THRESHOLD, _LEFT, _RIGHT, _IS_LEAF, _MISSING_LEFT, _VALUE = range(len(NODE_COLUMNS))


@dataclass(frozen=True)
class TreeEnsemble:
    """A binary boosted-tree classifier: ``baseline`` plus the trees whose nodes are the
    rows ``offsets[t]:offsets[t + 1]`` of ``nodes`` (columns ``NODE_COLUMNS``), over
    rows of ``n_features`` values."""

    baseline: float
    offsets: np.ndarray
    nodes: np.ndarray
    n_features: int

    @classmethod
    def from_sklearn(cls, model: Any, n_features: int) -> TreeEnsemble:
        """Export a fitted binary ``HistGradientBoostingClassifier`` (numeric features only)."""
        if len(model.classes_) != 2:
            raise ValueError(f"only a binary classifier exports, this one has {len(model.classes_)} classes")
        trees = [predictors[0].nodes for predictors in model._predictors]
        if any(tree["is_categorical"].any() for tree in trees):
            raise ValueError("a classifier with categorical splits does not export")
        table = [np.column_stack([tree[name].astype(np.float64) for name in _SKLEARN_FIELDS]) for tree in trees]
        offsets = np.r_[0, np.cumsum([len(t) for t in table])].astype(np.int64)
        nodes = np.vstack(table)
        return cls(float(np.ravel(model._baseline_prediction)[0]), offsets, nodes, n_features)

    @property
    def n_trees(self) -> int:
        return len(self.offsets) - 1

    def raw(self, features: np.ndarray) -> np.ndarray:
        """The raw score (log-odds) of each row, as scikit-learn's ``decision_function``:
        the baseline, then each tree's leaf value added in order."""
        x = np.asarray(features, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.n_features:
            raise ValueError(f"expected rows of {self.n_features} features, got shape {x.shape}")
        raw = np.full(len(x), self.baseline)
        feature = self.nodes[:, _FEATURE].astype(np.int64)
        left = self.nodes[:, _LEFT].astype(np.int64)
        right = self.nodes[:, _RIGHT].astype(np.int64)
        leaf = self.nodes[:, _IS_LEAF] > 0
        missing_left = self.nodes[:, _MISSING_LEFT] > 0
        threshold = self.nodes[:, _THRESHOLD]
        rows = np.arange(len(x))
        for start in self.offsets[:-1]:
            at = np.full(len(x), start)  # each row's node, as a row of the table
            inner = ~leaf[at]
            while inner.any():
                node = at[inner]
                value = x[rows[inner], feature[node]]
                goes_left = np.where(np.isnan(value), missing_left[node], value <= threshold[node])
                at[inner] = start + np.where(goes_left, left[node], right[node])
                inner = ~leaf[at]
            raw += self.nodes[at, _VALUE]
        return raw

    def probability(self, features: np.ndarray) -> np.ndarray:
        """P(class 1) of each row, as scikit-learn's ``predict_proba(...)[:, 1]``."""
        return 1.0 / (1.0 + np.exp(-self.raw(features)))

    def save(self, directory: Path, prefix: str) -> dict[str, Any]:
        """Write the offsets and node table as ``<prefix>_offsets.npy`` and
        ``<prefix>_nodes.npy``; return the JSON part."""
        save_array(directory, f"{prefix}_offsets.npy", self.offsets)
        save_array(directory, f"{prefix}_nodes.npy", self.nodes)
        return {"baseline": self.baseline, "columns": list(NODE_COLUMNS)}

    @classmethod
    def load(cls, directory: Path, state: Any, prefix: str, n_features: int, field: str) -> TreeEnsemble:
        """Read trees saved by ``save`` for rows of ``n_features`` values; ``field`` names
        ``state`` in the messages. Refuses any table that is not a set of finite trees
        over those features."""
        baseline = state.get("baseline") if isinstance(state, dict) else None
        if not isinstance(baseline, (int, float)) or isinstance(baseline, bool) or not np.isfinite(baseline):
            raise GateLoadError(f"{directory}: field '{field}.baseline' must be a finite number")
        if state.get("columns") != list(NODE_COLUMNS):
            raise GateLoadError(f"{directory}: field '{field}.columns' must be {list(NODE_COLUMNS)}")
        offsets_file, nodes_file = f"{prefix}_offsets.npy", f"{prefix}_nodes.npy"
        offsets, nodes = load_array(directory, offsets_file), load_array(directory, nodes_file)
        if offsets.ndim != 1 or offsets.dtype.kind not in "iu" or len(offsets) < 2 or offsets[0] != 0:
            raise GateLoadError(f"{directory}: file {offsets_file!r} must hold integer offsets starting at 0")
        if np.any(np.diff(offsets) < 1):
            raise GateLoadError(f"{directory}: file {offsets_file!r} must increase: every tree has a node")
        if nodes.ndim != 2 or nodes.shape != (offsets[-1], len(NODE_COLUMNS)) or nodes.dtype != np.float64:
            raise GateLoadError(
                f"{directory}: file {nodes_file!r} must hold {offsets[-1]}x{len(NODE_COLUMNS)} float64 values, "
                f"got {nodes.shape} {nodes.dtype}"
            )
        problem = _tree_problem(nodes, offsets.astype(np.int64), n_features)
        if problem:
            raise GateLoadError(f"{directory}: file {nodes_file!r}: {problem}")
        return cls(float(baseline), offsets.astype(np.int64), nodes, n_features)


#: scikit-learn's node fields, in the order of ``NODE_COLUMNS``.
_SKLEARN_FIELDS = ("feature_idx", "num_threshold", "left", "right", "is_leaf", "missing_go_to_left", "value")


def _tree_problem(nodes: np.ndarray, offsets: np.ndarray, n_features: int) -> str | None:
    """What makes ``nodes`` no set of trees over ``n_features`` features, or ``None``."""
    if not np.all(np.isfinite(nodes)):
        return "non-finite values"
    integral = nodes[:, [_FEATURE, _LEFT, _RIGHT, _IS_LEAF, _MISSING_LEFT]]
    if np.any(integral != np.round(integral)):
        return "an index or flag that is not a whole number"
    if not np.all(np.isin(nodes[:, [_IS_LEAF, _MISSING_LEFT]], (0.0, 1.0))):
        return "a flag that is not 0 or 1"
    inner = nodes[:, _IS_LEAF] == 0
    if np.any((nodes[inner, _FEATURE] < 0) | (nodes[inner, _FEATURE] >= n_features)):
        return f"a split on a feature outside 0..{n_features - 1}"
    size = np.repeat(np.diff(offsets), np.diff(offsets))  # each node's tree size
    index = np.arange(len(nodes)) - np.repeat(offsets[:-1], np.diff(offsets))  # index within its tree
    for column in (_LEFT, _RIGHT):
        child = nodes[inner, column]
        if np.any((child <= index[inner]) | (child >= size[inner])):
            return "a child that is not a later node of its own tree"
    return None
