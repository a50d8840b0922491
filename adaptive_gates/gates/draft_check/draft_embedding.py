"""The draft's own sentence embedding as combiner columns: the draft-check gate's
``draft_embedding`` option.

The draft features (``signals.draft``) read a draft's form and its agreement with the
passages; what the draft *is about* (a date, a person, a place, a film) they read only
through a few kind checks. The draft's sentence embedding (the gate's encoder, MiniLM
by default) carries that; reduced to a few principal components learned from the
training drafts only, it becomes a few more columns. Measured on the bundled outcomes
(``benchmarks/draft_check_inputs.py``, pooled six-task cross-fitting, ten fold seeds),
16 components added +0.017 ± 0.009 oracle-gap capture, more than the seed-to-seed spread;
each decision then embeds its draft (one more encoder call).

Saved as two arrays beside the gate's (``draft_projection_mean.npy``,
``draft_projection_components.npy``) and their shape in the state; a load refuses
arrays of another shape, naming the file.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import GateLoadError
from ...persistence.saved_format import load_array, save_array
from ..combiner.features import Projection

#: How the columns are named: ``draft_pc0``, ``draft_pc1``, ...
PREFIX = "draft_pc"
_MEAN, _COMPONENTS = "draft_projection_mean.npy", "draft_projection_components.npy"


@dataclass(frozen=True)
class DraftProjection:
    """The principal components of the training drafts' embeddings."""

    projection: Projection

    @classmethod
    def fit(cls, vectors: np.ndarray, dims: int, seed: int = 0) -> DraftProjection:
        """Learn ``dims`` components (at most the rows' and the width's) from ``vectors``."""
        from sklearn.decomposition import PCA

        e = np.asarray(vectors, dtype=np.float64)
        pca = PCA(n_components=min(dims, *e.shape), random_state=seed).fit(e)
        return cls(Projection(pca.mean_.astype(np.float64), pca.components_.astype(np.float64)))

    @property
    def width(self) -> int:
        """The embedding width it projects."""
        return len(self.projection.mean)

    @property
    def names(self) -> tuple[str, ...]:
        """The columns' names."""
        return tuple(f"{PREFIX}{i}" for i in range(len(self.projection.components)))

    def columns(self, vectors: np.ndarray) -> np.ndarray:
        """Each draft's coordinates on the components (one row per vector)."""
        return self.projection.apply(vectors)

    def write(self, directory: Path) -> dict[str, int]:
        """Write the arrays into ``directory``; return the state that reads them back."""
        save_array(directory, _MEAN, self.projection.mean)
        save_array(directory, _COMPONENTS, self.projection.components)
        return {"dims": len(self.projection.components), "width": self.width}

    @classmethod
    def read(cls, directory: Path, state: Any) -> DraftProjection:
        """What ``write`` wrote (``state``: ``state.draft_projection``), checked."""
        dims, width = (state.get("dims"), state.get("width")) if isinstance(state, dict) else (None, None)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (dims, width)):
            raise GateLoadError(f"{directory}: field 'state.draft_projection' must give positive 'dims' and 'width'")
        arrays = {}
        for name, shape in ((_MEAN, (width,)), (_COMPONENTS, (dims, width))):
            array = load_array(directory, name)
            if array.shape != shape or array.dtype.kind != "f" or not np.all(np.isfinite(array)):
                raise GateLoadError(f"{directory}: file {name!r} must hold {shape} finite floats, got {array.shape}")
            arrays[name] = array.astype(np.float64)
        return cls(Projection(arrays[_MEAN], arrays[_COMPONENTS]))
