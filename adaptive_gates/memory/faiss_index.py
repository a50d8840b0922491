"""Which faiss index a ``FaissMemory`` searches, and how it is built, grown and checked.

Small memories are searched exactly (``IndexFlatIP``); past ``switch_at`` rows an
approximate index answers in well under a millisecond where the exact scan costs
~6 ms at 100,000 rows (benchmarks/skr_memory_scale.py). All indexes use inner
product on L2-normalised vectors, i.e. cosine.

- ``"auto"`` (default): exact below ``switch_at`` rows, HNSW from there on.
- ``"exact"``: always ``IndexFlatIP``.
- ``"hnsw"``: ``IndexHNSWFlat`` from ``switch_at`` rows on; grows by plain adds.
- ``"ivf"``: ``IndexIVFFlat`` from ``switch_at`` rows on. Its coarse centroids are
  trained on the rows present when it is built, with ``nlist = 4 * sqrt(rows)``; new
  rows are added to the trained lists, and the index is rebuilt (retrained) once the
  memory has grown ``retrain_growth`` times since the last training, so the lists do
  not grow unbounded past what the centroids were fitted for.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from pathlib import Path
from typing import Any, Literal

import numpy as np

IndexKind = Literal["auto", "exact", "hnsw", "ivf"]
#: faiss's own default seed for HNSW levels, offset by the rows already held.
_HNSW_SEED = 12345
INDEX_KINDS = ("auto", "exact", "hnsw", "ivf")

#: Rows from which "auto" leaves the exact scan: about 1 ms for one exact search there
#: (one thread; 0.57 ms at 10,000 rows, 11 ms at 100,000 on a busy machine), while HNSW
#: (M=32, efSearch=64) answers in ~0.3 ms at recall@10 0.97 (benchmarks/skr_memory_scale.py).
DEFAULT_SWITCH_AT = 20_000
#: faiss's rule of thumb: at least 39 training rows per IVF centroid.
_ROWS_PER_CENTROID = 39


@dataclass(frozen=True)
class IndexSettings:
    """The index a memory uses and its tuning (saved with the memory's state).

    Defaults measured on 100,000 real MiniLM vectors: HNSW M=32, efSearch=64 gives
    recall@10 0.97 in 0.3 ms; IVF (nlist = 4 sqrt(rows)) needs nprobe=64 for 0.94 in
    0.8 ms, so HNSW is the one "auto" picks.

    ``hnsw_m``: graph degree; ``ef_construction`` / ``ef_search``: HNSW's candidate
    lists when adding / searching (a search uses ``max(ef_search, k)``); ``nprobe``:
    IVF lists visited per query; ``retrain_growth``: IVF's growth factor before it
    is trained again.
    """

    index: IndexKind = "auto"
    switch_at: int = DEFAULT_SWITCH_AT
    hnsw_m: int = 32
    ef_construction: int = 80
    ef_search: int = 64
    nprobe: int = 64
    retrain_growth: float = 4.0

    def __post_init__(self) -> None:
        if self.index not in INDEX_KINDS:
            raise ValueError(f"index must be one of {INDEX_KINDS}, got {self.index!r}")
        for name in ("switch_at", "hnsw_m", "ef_construction", "ef_search", "nprobe"):
            value = getattr(self, name)
            least = 0 if name == "switch_at" else 1
            if isinstance(value, bool) or not isinstance(value, int) or value < least:
                raise ValueError(f"{name} must be an int >= {least}, got {value!r}")
        growth = self.retrain_growth
        if isinstance(growth, bool) or not isinstance(growth, (int, float)) or not 1 < growth < math.inf:
            raise ValueError(f"retrain_growth must be a number > 1, got {growth!r}")

    @property
    def approximate(self) -> Literal["hnsw", "ivf"] | None:
        """The approximate index used past ``switch_at`` rows, if any."""
        if self.index == "exact":
            return None
        return "hnsw" if self.index == "auto" else self.index

    def to_state(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_state(cls, state: dict[str, Any]) -> IndexSettings:
        """Settings saved by ``to_state``; unknown keys are an error (a ValueError)."""
        names = {f.name for f in fields(cls)}
        unknown = sorted(set(state) - names)
        if unknown:
            raise ValueError(f"unknown index settings {unknown}")
        return cls(**state)


def structure(index: Any) -> str:
    """``"exact"``, ``"hnsw"`` or ``"ivf"``: what kind of index ``index`` is."""
    import faiss

    if isinstance(index, faiss.IndexFlat):
        return "exact"
    if isinstance(index, faiss.IndexHNSWFlat):
        return "hnsw"
    if isinstance(index, faiss.IndexIVFFlat):
        return "ivf"
    raise ValueError(f"unsupported faiss index {type(index).__name__}")


def wanted(settings: IndexSettings, rows: int) -> str:
    """The structure a memory of ``rows`` rows should search with."""
    approximate = settings.approximate
    if approximate is None or rows < max(settings.switch_at, 1):
        return "exact"
    if approximate == "ivf" and rows < _ROWS_PER_CENTROID:
        return "exact"  # too few rows to train even one centroid well
    return approximate


def needs_rebuild(settings: IndexSettings, index: Any, trained_rows: int) -> bool:
    """Whether ``index`` should be replaced by a fresh build over its rows: it is not
    the structure its size calls for, or it is an IVF index grown past its training."""
    current, target = structure(index), wanted(settings, index.ntotal)
    if current == "exact":
        return target != "exact"
    if current == "ivf":
        return index.ntotal >= settings.retrain_growth * max(trained_rows, 1)
    return False  # HNSW only grows


def empty_exact(dimension: int) -> Any:
    import faiss

    return faiss.IndexFlatIP(dimension)


def build(settings: IndexSettings, vectors: np.ndarray) -> Any:
    """A new index of the structure ``settings`` want for these (normalised) rows,
    holding them in order (row i has id i)."""
    import faiss

    rows, dimension = vectors.shape
    kind = wanted(settings, rows)
    index: faiss.Index
    if kind == "exact":
        index = faiss.IndexFlatIP(dimension)
    elif kind == "hnsw":
        hnsw = faiss.IndexHNSWFlat(dimension, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        hnsw.hnsw.efConstruction = settings.ef_construction
        index = hnsw
    else:
        nlist = max(1, min(round(4 * math.sqrt(rows)), rows // _ROWS_PER_CENTROID))
        ivf = faiss.IndexIVFFlat(faiss.IndexFlatIP(dimension), dimension, nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.train(vectors)
        ivf.make_direct_map()  # so the rows can be read back (entries, rebuilds)
        index = ivf
    configure(settings, index)
    add(index, vectors)
    return index


def add(index: Any, vectors: np.ndarray) -> None:
    """Append (normalised) rows. An HNSW index draws each new row's level from a random
    generator that faiss does not save: it is seeded from the row count first, so a
    loaded memory grows into the same graph as the one that was saved."""
    import faiss

    if structure(index) == "hnsw":
        index.hnsw.rng = faiss.RandomGenerator(_HNSW_SEED + index.ntotal)  # type: ignore[attr-defined]  # not in faiss's stubs
    index.add(vectors)


def configure(settings: IndexSettings, index: Any) -> None:
    """Apply the search-time settings to ``index``."""
    kind = structure(index)
    if kind == "hnsw":
        index.hnsw.efSearch = settings.ef_search
    elif kind == "ivf":
        index.nprobe = min(settings.nprobe, index.nlist)


def search(index: Any, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``index.search`` that always returns ``k`` real neighbours when it holds ``k``
    rows: a query for which the approximate search found fewer (an IVF probe of sparse
    lists, an HNSW query stuck in a small region) is answered exhaustively instead."""
    import faiss

    sims, idx = index.search(queries, k)
    short = np.flatnonzero((idx < 0).any(axis=1))
    if short.size:
        kind = structure(index)
        if kind == "hnsw":
            sims[short], idx[short] = faiss.downcast_index(index.storage).search(queries[short], k)
        elif kind == "ivf":
            params = faiss.SearchParametersIVF()
            params.nprobe = index.nlist
            sims[short], idx[short] = index.search(queries[short], k, params=params)
    return sims, idx


def check_loaded(settings: IndexSettings, index: Any, dimension: int) -> str | None:
    """What is wrong with a loaded ``index`` for these settings, or None."""
    import faiss

    try:
        kind = structure(index)
    except ValueError as exc:
        return str(exc)
    if index.d != dimension:
        return f"the index holds {index.d}-d vectors, not {dimension}-d"
    if index.metric_type != faiss.METRIC_INNER_PRODUCT:
        return "the index does not use inner product (cosine on normalised vectors)"
    if kind != "exact" and kind != settings.approximate:
        return f"the index is {kind!r} but the settings use {settings.approximate or 'exact'!r} search"
    return None


def write_index(index: Any, path: Path) -> None:
    """Write ``index`` in faiss's own format to the new file ``path``. faiss serialises
    it and Python writes the bytes, so a failed write (a full disk) is an ``OSError``
    with the system's cause, where faiss's own ``write_index`` raises a bare
    ``RuntimeError``."""
    import faiss

    with path.open("xb") as fh:
        fh.write(faiss.serialize_index(index).data)
