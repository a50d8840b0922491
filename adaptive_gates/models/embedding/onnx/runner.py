"""A sentence-transformers pipeline run by onnxruntime: the folder's tokenizer and
truncation, the exported Transformer, then its pooling and normalisation in numpy."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ...optional import require
from ..st_folder import FolderPipeline

#: The Transformer's inputs, in the order the export takes them (the tokenizer's subset).
INPUT_NAMES = ("input_ids", "attention_mask", "token_type_ids")


def intra_op_threads() -> int:
    """onnxruntime's threads for one call: ``OMP_NUM_THREADS`` when set, else torch's
    thread count when torch is loaded, else 0 (onnxruntime's own default)."""
    explicit = os.environ.get("OMP_NUM_THREADS", "")
    if explicit.isdigit() and int(explicit) > 0:
        return int(explicit)
    torch = sys.modules.get("torch")
    return int(torch.get_num_threads()) if torch is not None else 0


def open_session(path: Path, threads: int) -> Any:
    """An onnxruntime CPU session on the model file ``path``."""
    ort = require("onnxruntime", needed_for="OnnxEmbedder")
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def max_length(folder: Path, pipeline: FolderPipeline, tokenizer: Any) -> int:
    """Tokens kept per text: the folder's ``max_seq_length``, else (as sentence-transformers
    does) the smaller of the tokenizer's limit and the model's position embeddings."""
    if pipeline.max_seq_length is not None:
        return pipeline.max_seq_length
    config = require("transformers").AutoConfig.from_pretrained(folder)
    positions = getattr(config, "max_position_embeddings", None) or tokenizer.model_max_length
    return int(min(positions, tokenizer.model_max_length))


class OnnxPipeline:
    """Tokenizer + onnxruntime session + pooling of one folder. Not thread-safe (the
    fast tokenizer is not): callers serialise calls."""

    def __init__(self, session: Any, tokenizer: Any, pipeline: FolderPipeline, max_length: int) -> None:
        self.session = session
        self.tokenizer = tokenizer
        self.pipeline = pipeline
        self.max_length = max_length
        self.input_names = [i.name for i in session.get_inputs()]

    def embed(self, texts: list[str], *, normalize: bool, batch_size: int, batches: Any = None) -> np.ndarray:
        """float32 ``(len(texts), dimension)``; texts are run longest first in batches
        of ``batch_size`` (less padding); ``batches`` may wrap the batch iterator (a
        progress bar)."""
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.pipeline.dimension), dtype=np.float32)
        starts: Iterator[int] | Any = iter(range(0, len(texts), batch_size))
        if batches is not None:
            starts = batches(starts)
        for start in starts:
            rows = order[start : start + batch_size]
            out[rows] = self._embed_batch([texts[i] for i in rows])
        if normalize or self.pipeline.normalize:
            norms = np.linalg.norm(out, axis=1, keepdims=True)
            out /= np.maximum(norms, 1e-12)  # as torch's F.normalize
        return out

    def _embed_batch(self, texts: list[str]) -> np.ndarray:
        texts = [t.strip() for t in texts]  # as sentence-transformers' Transformer does
        if self.pipeline.do_lower_case:
            texts = [t.lower() for t in texts]
        encoded = self.tokenizer(
            texts, padding=True, truncation="longest_first", max_length=self.max_length, return_tensors="np"
        )
        feed = {name: np.asarray(encoded[name], dtype=np.int64) for name in self.input_names}
        (states,) = self.session.run(["last_hidden_state"], feed)
        return pool(states, feed["attention_mask"], self.pipeline)


def pool(states: np.ndarray, attention_mask: np.ndarray, pipeline: FolderPipeline) -> np.ndarray:
    """One vector per text from token states ``(batch, tokens, width)``, as the folder's Pooling."""
    if pipeline.pooling == "cls":
        return np.asarray(states[:, 0], dtype=np.float32)
    mask = attention_mask[:, :, None].astype(np.float32)
    if pipeline.pooling == "max":
        return np.asarray(np.where(mask > 0, states, -1e9).max(axis=1), dtype=np.float32)
    summed = (states * mask).sum(axis=1)
    return np.asarray(summed / np.maximum(mask.sum(axis=1), 1e-9), dtype=np.float32)
