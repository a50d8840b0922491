"""The retriever contract (``Retriever``; the ``Hit`` it returns is a record of
``adaptive_gates.records.data``, re-exported here) and the saving and loading both retrievers share.

A saved retriever is a directory holding ``config.json``, the backend's own index
files and ``corpus.jsonl``; nothing is pickled, so loading never runs code. It is
saved as a gate is (``persistence``): written whole, then swapped in, with the SHA-256
of every file and of each of its own fields in ``config.json``, so a changed file or
field is refused on load, naming it. A retriever saved before that (``format_version``
1, no checksums) still loads, its files unverified as they were then.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from ..errors import AdaptiveGatesError, GateLoadError
from ..persistence.saved_format import read_config as read_checked_config
from ..persistence.saved_format import read_json_object, save_directory, write_directory
from ..records.data import CorpusRecord, Hit, load_corpus, passage_text, write_jsonl

__all__ = ["Hit", "Retriever", "passage_text"]

CONFIG_FILE = "config.json"
CORPUS_FILE = "corpus.jsonl"
#: The format of retrievers saved before they were saved as gates are: no ``format``
#: field and no checksums. Read, never written.
UNCHECKED_FORMAT_VERSION = 1


@runtime_checkable
class Retriever(Protocol):
    """Anything that returns the ``k`` best passages for a query, best first."""

    def search(self, query: str, k: int = 3) -> list[Hit]: ...

    def search_batch(self, queries: Sequence[str], k: int = 3) -> list[list[Hit]]: ...


def check_k(k: object, size: int) -> int:
    """``k`` validated (a positive int) and clipped to the corpus ``size``."""
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive int, got {k!r}")
    return min(k, size)


def make_hit(record: CorpusRecord, score: float) -> Hit:
    """A ``Hit`` for ``record`` with a plain-float score."""
    return Hit(id=record.id, text=record.text, score=float(score), title=record.title)


def save_retriever(
    path: str | Path, config: dict[str, Any], write_files: Callable[[Path], None], *, overwrite: bool
) -> Path:
    """Save a retriever at ``path`` as a gate is saved: ``write_files`` writes its files
    into a fresh directory, ``config.json`` gets ``config`` (at its top, where a retriever
    saved before checksums had it; its ``state`` stays empty) and the checksums, and the
    directory replaces ``path`` whole. Replaces only a saved retriever or gate, and that
    only with ``overwrite``."""

    def state(directory: Path) -> dict[str, Any]:
        write_files(directory)
        return {}

    return save_directory(path, lambda directory: write_directory(directory, config, state), overwrite=overwrite)


def read_config(directory: str | Path, expected_type: str) -> dict[str, Any]:
    """Read and check ``config.json`` (inside ``reading(directory)``): its checksums and
    those of every file it lists, or, saved before checksums, its fields alone;
    ``GateLoadError`` names the file or field at fault."""
    path = Path(directory) / CONFIG_FILE
    config = read_json_object(path)
    if "format" in config or config.get("format_version") != UNCHECKED_FORMAT_VERSION:
        config = read_checked_config(directory)
    if config.get("type") != expected_type:
        raise GateLoadError(f"{path}: field 'type' is {config.get('type')!r}, expected {expected_type!r}")
    return config


def config_int(config: dict[str, Any], directory: str | Path, name: str) -> int:
    """A non-negative int field of ``config.json``, or ``GateLoadError`` naming it."""
    value = config.get(name)
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise GateLoadError(
            f"{Path(directory) / CONFIG_FILE}: field {name!r} must be a non-negative int, got {value!r}"
        )
    return value


def require_file(directory: str | Path, name: str) -> Path:
    """The path of ``name`` in ``directory``; ``GateLoadError`` if it is absent."""
    path = Path(directory) / name
    if not path.is_file():
        raise GateLoadError(f"{path}: missing")
    return path


def save_corpus(directory: Path, records: Sequence[CorpusRecord]) -> None:
    """Write the records to ``corpus.jsonl`` in index order."""
    rows = [{"id": r.id, "title": r.title, "text": r.text} for r in records]
    write_jsonl(directory / CORPUS_FILE, rows)


def read_corpus(directory: str | Path, count: int) -> list[CorpusRecord]:
    """Read ``corpus.jsonl`` and check it holds the ``count`` records the index was built on."""
    path = require_file(directory, CORPUS_FILE)
    try:
        records = load_corpus(path)
    except AdaptiveGatesError as exc:
        raise GateLoadError(f"{path}: {exc}") from None
    if len(records) != count:
        raise GateLoadError(f"{path}: holds {len(records)} records but config.json field 'count' is {count}")
    return records
