"""The record a saved gate keeps of the sentence encoder it was fitted with, checked on
load: vectors of another encoder (or of another width) would be read as if they were
the ones the gate learned from."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ...errors import GateLoadError
from ...models.protocols import Embedder
from ...persistence.saved_format import MAX_DIMENSION, check_saved_backend


def encoder_record(encoder: Embedder, dimension: int) -> dict[str, Any]:
    """What ``state["encoder"]`` holds: the encoder's model id and its vectors' width."""
    return {"id": encoder.model_id, "dimension": int(dimension)}


def check_encoder_record(directory: Path, record: Any, given: Embedder | None) -> int:
    """Refuse a saved ``state.encoder`` that is malformed or names another encoder than
    ``given`` (``None``: the embedded MiniLM, which a gate takes when given none, so
    its weight package must be installed: ``MissingModelPackageError``); return the
    saved width."""
    dimension = record.get("dimension") if isinstance(record, dict) else None
    if (
        not isinstance(record, dict)
        or not isinstance(record.get("id"), str)
        or isinstance(dimension, bool)
        or not isinstance(dimension, int)
        or not 1 <= dimension <= MAX_DIMENSION
    ):
        raise GateLoadError(
            f"{directory}: field 'state.encoder' is missing or malformed "
            f"(an id and a dimension in [1, {MAX_DIMENSION}])"
        )
    if given is None:
        from ...models.defaults import MINILM_ID
        from ...models.embedded import embedded_minilm_dir

        check_saved_backend(directory, "state.encoder.id", record["id"], MINILM_ID, "encoder", pass_argument="embedder")
        embedded_minilm_dir()  # the gate will embed with it: a missing weight package is said at load
    else:
        check_saved_backend(directory, "state.encoder.id", record["id"], given.model_id, "embedder")
        check_saved_backend(
            directory, "state.encoder.dimension", record["dimension"], given.dimension, "embedder's dimension"
        )
    return int(record["dimension"])
