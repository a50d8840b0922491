"""What a sentence-transformers model folder says about its pipeline, for running it
outside sentence-transformers: a Transformer, one pooling, optionally a Normalize.

Anything else (a Dense layer, several poolings, weighted-mean or last-token pooling,
prompt-only pooling) is refused with ``UnsupportedFolderError`` saying what, so the caller
can use sentence-transformers itself.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from ...errors import UnsupportedFolderError

Pooling = Literal["mean", "cls", "max"]

_TRANSFORMER = "sentence_transformers.models.Transformer"
_POOLING = "sentence_transformers.models.Pooling"
_NORMALIZE = "sentence_transformers.models.Normalize"
_POOLING_MODES: dict[str, Pooling] = {
    "pooling_mode_mean_tokens": "mean",
    "pooling_mode_cls_token": "cls",
    "pooling_mode_max_tokens": "max",
}
_UNSUPPORTED_MODES = ("pooling_mode_mean_sqrt_len_tokens", "pooling_mode_weightedmean_tokens", "pooling_mode_lasttoken")


#: The former name of ``UnsupportedFolderError``.
UnsupportedFolder = UnsupportedFolderError


@dataclass(frozen=True)
class FolderPipeline:
    """The pipeline of a sentence-transformers folder: pooling, width, normalisation and
    the Transformer module's truncation and casing."""

    pooling: Pooling
    dimension: int
    normalize: bool
    max_seq_length: int | None
    do_lower_case: bool


def read_pipeline(folder: Path) -> FolderPipeline:
    """The pipeline of ``folder`` (its modules.json and module configs), or ``UnsupportedFolderError``."""
    modules = _json(folder / "modules.json")
    if not isinstance(modules, list) or not modules:
        raise UnsupportedFolderError(f"{folder / 'modules.json'}: expected a non-empty list of modules")
    if not all(isinstance(m, dict) for m in modules):
        raise UnsupportedFolderError(f"{folder / 'modules.json'}: each module must be a JSON object")
    types = [str(m.get("type", "")) for m in modules]
    if types not in ([_TRANSFORMER, _POOLING], [_TRANSFORMER, _POOLING, _NORMALIZE]):
        message = f"modules {types} are not Transformer, Pooling[, Normalize]"
        raise UnsupportedFolderError(f"{folder / 'modules.json'}: {message}")
    if modules[0].get("path", "") != "":
        raise UnsupportedFolderError(f"{folder / 'modules.json'}: the Transformer module is not the folder itself")
    pooling_file = folder / str(modules[1].get("path", "")) / "config.json"
    pooling = _json(pooling_file)
    if not isinstance(pooling, dict):
        raise UnsupportedFolderError(f"{pooling_file}: expected a JSON object")
    modes = [mode for key, mode in _POOLING_MODES.items() if pooling.get(key)]
    unsupported = [key for key in _UNSUPPORTED_MODES if pooling.get(key)]
    if unsupported or len(modes) != 1:
        raise UnsupportedFolderError(f"{pooling_file}: supported is exactly one of {list(_POOLING_MODES)}")
    if pooling.get("include_prompt") is False:
        raise UnsupportedFolderError(f"{pooling_file}: include_prompt=false is not supported")
    dimension = pooling.get("word_embedding_dimension")
    if isinstance(dimension, bool) or not isinstance(dimension, int) or dimension < 1:
        raise UnsupportedFolderError(f"{pooling_file}: word_embedding_dimension must be a positive int")
    config_file = folder / "sentence_bert_config.json"
    config = _json(config_file) if config_file.is_file() else {}
    if not isinstance(config, dict):
        raise UnsupportedFolderError(f"{config_file}: expected a JSON object")
    max_seq_length = config.get("max_seq_length")
    if max_seq_length is not None and (isinstance(max_seq_length, bool) or not isinstance(max_seq_length, int)):
        raise UnsupportedFolderError(f"{config_file}: max_seq_length must be an int")
    return FolderPipeline(
        pooling=modes[0],
        dimension=dimension,
        normalize=len(modules) == 3,
        max_seq_length=max_seq_length,
        do_lower_case=bool(config.get("do_lower_case", False)),
    )


def _json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UnsupportedFolderError(f"{path}: cannot read it as JSON ({exc})") from exc
