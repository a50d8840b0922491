"""Helpers shared by the benchmark scripts: data paths, an embedder that reuses
vectors, and writing result tables."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from adaptive_gates.data import CorpusRecord, iter_jsonl
from adaptive_gates.models.protocols import Embedder

REPO = Path(__file__).resolve().parents[1]
DEFAULT_DATA = REPO.parent / "shared" / "data"
RESULTS = REPO / "benchmarks" / "results"
ADARAGUE_SPLITS = ("nq", "trivia", "squad", "hotpotqa", "2wikimultihopqa", "musique")


def add_data_argument(parser: argparse.ArgumentParser) -> None:
    """``--data DIR``: the shared data folder (holding ``adarague/``)."""
    parser.add_argument(
        "--data", type=Path, default=DEFAULT_DATA, help=f"shared data folder (default: {DEFAULT_DATA})"
    )


def adarague_path(data: Path, split: str) -> Path:
    """The outcome records of one AdaRAGUE train split."""
    path = data / "adarague" / f"{split}.train.jsonl"
    if not path.is_file():
        raise SystemExit(f"missing {path}: pass --data pointing at the shared data folder")
    return path


@dataclass(frozen=True)
class HotpotContext:
    """An AdaRAGUE HotpotQA question with its context paragraphs as corpus records."""

    question: str
    answers: list[str]
    supporting: list[CorpusRecord]  # HotpotQA's ``is_supporting`` paragraphs: the gold ones
    others: list[CorpusRecord]  # the question's distractor paragraphs found in the corpus


def hotpotqa_contexts(data: Path, corpus: Sequence[CorpusRecord]) -> list[HotpotContext]:
    """The AdaRAGUE HotpotQA questions (HotpotQA dev questions, file order) whose
    supporting paragraphs are all in ``corpus`` with the same title and text."""
    by_paragraph = {(r.title, r.text): r for r in corpus}
    found = []
    for _, obj in iter_jsonl(adarague_path(data, "hotpotqa")):
        paragraphs = [(by_paragraph.get((c["title"], c["text"])), c["is_supporting"]) for c in obj["context"]]
        supporting = [r for r, gold in paragraphs if gold]
        if supporting and all(supporting):
            others = [r for r, gold in paragraphs if not gold and r is not None]
            found.append(HotpotContext(obj["question"], obj["answers"], supporting, others))
    return found


class LookupEmbedder:
    """An ``Embedder`` serving vectors from a table keyed by text.

    Texts missing from the table are embedded by ``inner``; with ``memoise`` their
    vectors are kept, so each text is embedded once however many gates share this
    embedder. ``model_id`` and ``dimension`` are the inner embedder's.
    """

    def __init__(self, inner: Embedder, *, memoise: bool = True) -> None:
        self.inner = inner
        self.memoise = memoise
        self._table: dict[str, np.ndarray] = {}

    @property
    def model_id(self) -> str:
        return self.inner.model_id

    @property
    def dimension(self) -> int:
        return self.inner.dimension

    def __contains__(self, text: object) -> bool:
        return text in self._table

    def store(self, texts: Sequence[str], vectors: np.ndarray) -> None:
        """Put precomputed vectors (one row per text) into the table."""
        vectors = np.asarray(vectors, dtype=np.float32)
        if vectors.shape != (len(texts), self.dimension):
            raise ValueError(f"expected shape {(len(texts), self.dimension)}, got {vectors.shape}")
        self._table.update(zip(texts, vectors))

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        missing = list(dict.fromkeys(t for t in texts if t not in self._table))
        fresh: dict[str, np.ndarray] = {}
        if missing:
            fresh = dict(zip(missing, np.asarray(self.inner.embed(missing), dtype=np.float32)))
            if self.memoise:
                self._table.update(fresh)
        return np.stack([self._table[t] if t in self._table else fresh[t] for t in texts])


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub markdown table; floats are shown with three decimals, None as n/a."""

    def cell(value: Any) -> str:
        if value is None:
            return "n/a"
        if isinstance(value, float):
            return f"{value:.3f}"
        return str(value)

    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return "\n".join(lines)


def write_results(name: str, markdown: str, data: dict[str, Any]) -> tuple[Path, Path]:
    """Write ``results/<name>.md`` and ``results/<name>.json``."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    md, js = RESULTS / f"{name}.md", RESULTS / f"{name}.json"
    md.write_text(markdown + "\n", encoding="utf-8")
    js.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    return md, js

