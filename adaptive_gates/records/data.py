"""JSONL record types and their loaders.

Three record kinds (one JSON object a line):

- outcome: ``id, question, answers, pred_no_retrieval, pred_one_retrieval``
  (+ optional ``context``, and ``logprobs_no_retrieval``: the no-retrieval answer's
  tokens in OpenAI's shape) — answers already produced without and with retrieval;
- QA: ``id, question, answers`` (+ optional ``context``/``passage``); where gold
  answers are not needed (``load_qa(..., gold=False)``: collecting a user's own
  traffic) ``answers`` may be missing or empty, and a ``.txt`` file is read as one
  question a line;
- corpus: ``id, title, text``.

An outcome record's ``answers`` may be empty: the questions were collected without gold
answers, and such records are graded by agreement (``labels="agreement"``).

Every loader error names the file, the line and the field. A file whose name ends in
``.gz`` is read through gzip. A line longer than ``MAX_LINE_BYTES`` (64 MiB) is refused,
naming it, without reading it whole.
"""

from __future__ import annotations

import gzip
import hashlib
import logging
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO, TypeVar

from ..errors import DataFormatError
from ..persistence import strict_json
from ..persistence.json_lines import dumps_line
from .token_logprobs import TokenLogprob, tokens_from_openai, tokens_to_openai

logger = logging.getLogger(__name__)

__all__ = [
    "CorpusRecord",
    "OutcomeRecord",
    "QARecord",
    "iter_jsonl",
    "load_corpus",
    "load_outcome_files",
    "load_outcomes",
    "load_qa",
    "question_lines",
    "recover_torn_tail",
    "write_jsonl",
]


@dataclass(frozen=True)
class QARecord:
    """A question with its gold answers (and optionally its own context)."""

    id: str
    question: str
    answers: list[str]
    context: Any = None


@dataclass(frozen=True)
class OutcomeRecord:
    """A question answered twice: without retrieval and with one retrieval.

    ``logprobs_no_retrieval`` holds the no-retrieval answer's tokens with their
    log-probabilities (and top alternatives) when the LLM gave them, so gates that
    read log-probabilities are evaluated offline; ``None`` when it did not.
    """

    id: str
    question: str
    answers: list[str]
    pred_no_retrieval: str
    pred_one_retrieval: str
    context: Any = None
    extra: dict[str, Any] = field(default_factory=dict)
    logprobs_no_retrieval: tuple[TokenLogprob, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as a JSONL object (``extra`` fields flattened back in, log-probs
        in OpenAI's shape)."""
        out: dict[str, Any] = {
            "id": self.id,
            "question": self.question,
            "answers": list(self.answers),
            "pred_no_retrieval": self.pred_no_retrieval,
            "pred_one_retrieval": self.pred_one_retrieval,
        }
        if self.context is not None:
            out["context"] = self.context
        if self.logprobs_no_retrieval is not None:
            out["logprobs_no_retrieval"] = tokens_to_openai(self.logprobs_no_retrieval)
        out.update(self.extra)
        return out


@dataclass(frozen=True)
class CorpusRecord:
    """One retrievable passage."""

    id: str
    title: str
    text: str


def passage_text(title: str, text: str) -> str:
    """The text a passage is embedded and shown as: ``"title: text"``, or ``text`` alone."""
    return f"{title}: {text}" if title else text


@dataclass(frozen=True)
class Hit:
    """One retrieved passage with its retriever-specific score (higher is better)."""

    id: str
    text: str
    score: float
    title: str = ""

    def as_passage(self) -> str:
        """The passage as it would be put in a prompt."""
        return passage_text(self.title, self.text)


R = TypeVar("R", OutcomeRecord, QARecord, CorpusRecord)

#: The longest line a data file may hold, in bytes (of the decompressed text, for a
#: ``.gz`` file): a record with a long context takes a few hundred kilobytes, so a
#: longer line is a wrong file, refused before it is held in memory.
MAX_LINE_BYTES = 64 * 1024 * 1024


def iter_jsonl(path: str | Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """Yield ``(line_number, object)`` for each non-blank line of a JSONL file.

    ``DataFormatError`` names the file and line of a line that is not UTF-8, not valid
    JSON, nested too deep, holds a non-finite number or an integer too long
    (``strict_json``) or is no object, and of a ``.gz`` file cut short or corrupt.
    """
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    # Lines are decoded one by one so that a bad byte is reported with its line.
    for lineno, raw in _numbered_lines(path):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise DataFormatError(
                f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[exc.start]:02x} at column {exc.start + 1})"
            ) from None
        if not line.strip():
            continue
        try:
            obj = strict_json.loads(line)
        except ValueError as exc:
            raise DataFormatError(f"{path}:{lineno}: {exc}") from None
        if not isinstance(obj, dict):
            raise DataFormatError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
        yield lineno, obj


def _numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """The lines of ``path`` (through gzip for ``.gz``) with their numbers; a line
    longer than ``MAX_LINE_BYTES`` (never held whole: lines are read at most that long)
    and a compressed file that is cut short or corrupt are a ``DataFormatError`` naming
    the line."""
    limit = MAX_LINE_BYTES
    lineno = 0
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else path.open("rb") as fh:
            while raw := fh.readline(limit + 1):
                lineno += 1
                if len(raw) > limit and not raw.endswith(b"\n"):
                    raise DataFormatError(
                        f"{path}:{lineno}: the line is longer than {limit:,} bytes, the most a record may take "
                        f"(records are one JSON object a line: is this the file meant?)"
                    )
                yield lineno, raw
    except (EOFError, gzip.BadGzipFile, zlib.error) as exc:
        raise DataFormatError(f"{path}:{lineno + 1}: the compressed file is cut short or corrupt ({exc})") from None


def write_jsonl(path: str | Path, rows: list[dict[str, Any]], append: bool = False) -> None:
    """Write (or append) objects one a line, flushing so a crash loses nothing written."""
    with Path(path).open("a" if append else "w", encoding="utf-8") as fh:
        for row in rows:
            fh.write(dumps_line(row))
        fh.flush()


def recover_torn_tail(path: str | Path) -> Path | None:
    """Make an append-only JSONL file whole again after an interrupted write.

    ``write_jsonl`` ends every record with a newline, so a last line without one was
    cut short. If it still parses as a JSON object only its newline is missing and it
    is completed. Otherwise its bytes are moved to ``<path>.torn`` (appended, so
    nothing is ever lost), the file is cut back to its last complete record and a
    warning says so. Returns the side file when bytes were set aside, else ``None``.
    """
    path = Path(path)
    with path.open("r+b") as fh:
        start = _last_line_start(fh)
        if start is None:
            return None
        fh.seek(start)
        tail = fh.read()
        try:
            complete = isinstance(strict_json.loads(tail), dict)
        except ValueError:  # bad JSON or bad UTF-8: the write stopped inside a record
            complete = False
        if complete:
            fh.write(b"\n")
            return None
        side = path.with_name(path.name + ".torn")
        with side.open("ab") as torn:
            torn.write(tail + b"\n")
        fh.truncate(start)
    logger.warning(
        "%s: the last line was cut short (%d bytes of an interrupted write); set them aside in %s "
        "and kept the complete records before it",
        path,
        len(tail),
        side,
    )
    return side


def _last_line_start(fh: BinaryIO, block: int = 1 << 16) -> int | None:
    """The offset of a last line that has no final newline, or ``None`` if the file
    is empty or ends with one (read backwards: only the tail is touched)."""
    end = fh.seek(0, 2)
    if end == 0:
        return None
    fh.seek(end - 1)
    if fh.read(1) == b"\n":
        return None
    pos = end
    while pos > 0:
        size = min(block, pos)
        pos -= size
        fh.seek(pos)
        newline = fh.read(size).rfind(b"\n")
        if newline >= 0:
            return pos + newline + 1
    return 0


class _Fields:
    """Typed field access for one parsed line, with errors naming file:line:field."""

    def __init__(self, path: Path, lineno: int, obj: dict[str, Any]) -> None:
        self.where = f"{path}:{lineno}"
        self.obj = obj

    def fail(self, name: str, problem: str) -> DataFormatError:
        return DataFormatError(f"{self.where}: field {name!r} {problem}")

    def text(self, name: str, *, required: bool = True, allow_empty: bool = False) -> str:
        if name not in self.obj or self.obj[name] is None:
            if required:
                raise self.fail(name, "is missing")
            return ""
        value = self.obj[name]
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            value = str(value)
        if not isinstance(value, str):
            raise self.fail(name, f"must be a string, got {type(value).__name__}")
        if not allow_empty and not value.strip():
            raise self.fail(name, "is empty")
        return value

    def answers(self, name: str = "answers", *, allow_empty: bool = False, allow_missing: bool = False) -> list[str]:
        """The gold answers; ``allow_empty``: an empty list reads as none (``[]``);
        ``allow_missing``: so does a missing field."""
        if name not in self.obj:
            if allow_missing:
                return []
            raise self.fail(name, "is missing")
        value = self.obj[name]
        if isinstance(value, str):
            value = [value]
        if not isinstance(value, list) or not (value or allow_empty):
            raise self.fail(name, "must be a list of strings" if allow_empty else "must be a non-empty list of strings")
        out = []
        for item in value:
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                raise self.fail(name, f"holds a non-string item {item!r}")
            out.append(str(item))
        return out

    def token_logprobs(self, name: str) -> tuple[TokenLogprob, ...] | None:
        if self.obj.get(name) is None:
            return None
        try:
            return tokens_from_openai(self.obj[name])
        except ValueError as exc:
            raise self.fail(name, str(exc)) from None

    def ident(self, fallback: int) -> str:
        value = self.obj.get("id", fallback)
        if isinstance(value, bool) or not isinstance(value, (str, int)):
            raise self.fail("id", f"must be a string or an integer, got {value!r}")
        return str(value)


def _load(path: str | Path, parse: Callable[[_Fields, int], R]) -> list[R]:
    path = Path(path)
    records, lines = [], []
    for lineno, obj in iter_jsonl(path):
        records.append(parse(_Fields(path, lineno, obj), lineno))
        lines.append(lineno)
    if not records:
        raise DataFormatError(f"{path}: holds no records")
    _warn_duplicate_ids(path, [r.id for r in records], lines)
    return records


def _warn_duplicate_ids(path: Path, ids: list[str], lines: list[int], shown: int = 5) -> None:
    """Log one warning naming the ids that occur on more than one line (and those lines):
    a repeated id is usually a merge or a resumed run gone wrong, and it makes the
    records by id (resuming, labels, reports) ambiguous."""
    where: dict[str, list[int]] = {}
    for ident, lineno in zip(ids, lines):
        where.setdefault(ident, []).append(lineno)
    repeated = [(ident, at) for ident, at in where.items() if len(at) > 1]
    if not repeated:
        return
    listed = "; ".join(f"id {ident!r} on lines {', '.join(map(str, at))}" for ident, at in repeated[:shown])
    more = f"; and {len(repeated) - shown} more" if len(repeated) > shown else ""
    logger.warning("%s: ids repeated on more than one line (%d): %s%s", path, len(repeated), listed, more)


_OUTCOME_KEYS = {
    "id",
    "question",
    "answers",
    "pred_no_retrieval",
    "pred_one_retrieval",
    "context",
    "logprobs_no_retrieval",
}


def _parse_outcome(f: _Fields, lineno: int, require: Sequence[str] = ()) -> OutcomeRecord:
    for name in require:
        if f.obj.get(name) is None:
            raise f.fail(name, "is missing (every record must hold it here)")
    return OutcomeRecord(
        id=f.ident(lineno),
        question=f.text("question"),
        # No gold answer ([]) is allowed: such records are graded by agreement
        # (``selfknowledge.agreement_records``), the answer over passages as the reference.
        answers=f.answers(allow_empty=True),
        # An LLM may legitimately answer with an empty string.
        pred_no_retrieval=f.text("pred_no_retrieval", allow_empty=True),
        pred_one_retrieval=f.text("pred_one_retrieval", allow_empty=True),
        context=f.obj.get("context"),
        extra={k: v for k, v in f.obj.items() if k not in _OUTCOME_KEYS},
        logprobs_no_retrieval=f.token_logprobs("logprobs_no_retrieval"),
    )


def _parse_qa(f: _Fields, lineno: int, gold: bool = True) -> QARecord:
    return QARecord(
        id=f.ident(lineno),
        question=f.text("question"),
        answers=f.answers(
            "answers" if "answers" in f.obj or "answer" not in f.obj else "answer",
            allow_empty=not gold,
            allow_missing=not gold,
        ),
        context=f.obj.get("context", f.obj.get("passage")),
    )


def _parse_corpus(f: _Fields, lineno: int) -> CorpusRecord:
    return CorpusRecord(
        id=f.ident(lineno),
        title=f.text("title", required=False, allow_empty=True),
        text=f.text("text"),
    )


def load_outcomes(path: str | Path, *, require: Sequence[str] = ()) -> list[OutcomeRecord]:
    """Load outcome records (see module doc); raises ``DataFormatError`` on a bad line,
    or on a line without one of the optional fields named in ``require`` (e.g. the
    ``logprobs_no_retrieval`` a gate scores offline: ``Gate.record_fields``)."""
    required = tuple(require)
    return _load(path, lambda f, lineno: _parse_outcome(f, lineno, required))


def load_outcome_files(paths: str | Path | Sequence[str | Path], *, require: Sequence[str] = ()) -> list[OutcomeRecord]:
    """The outcome records of several files (e.g. of several data sets, to fit one gate
    on all of them), read in the order given and concatenated (``load_outcomes`` for
    each: an error names its file and line). One path alone is read as a list of one.

    An id repeated within one file is warned about as ``load_outcomes`` does; the same
    id in two files is no mistake (each data set numbers its own questions) and both
    records are kept as they are: none is dropped, merged or renamed (a gate learns
    from the records, not from their ids).
    """
    if isinstance(paths, (str, Path)):
        paths = [paths]
    paths = list(paths)
    if not paths:
        raise ValueError("no outcome files given")
    return [record for path in paths for record in load_outcomes(path, require=require)]


def load_qa(path: str | Path, *, gold: bool = True) -> list[QARecord]:
    """Load QA records; ``answer`` is accepted for ``answers`` and ``passage`` for ``context``.

    With ``gold=False`` (questions to collect outcomes for, where no gold answer is
    needed) a record may hold no answers (missing or ``[]``: ``answers == []``), and a
    ``.txt`` file is read as plain questions, one a line (``question_lines``).
    """
    if Path(path).suffix == ".txt":
        if gold:
            raise DataFormatError(f"{path}: a .txt file holds plain questions, without the gold answers needed here")
        return question_lines(path)
    records = _load(path, lambda f, lineno: _parse_qa(f, lineno, gold))
    ungraded = sum(1 for r in records if not r.answers)
    if ungraded:
        logger.info("%s: %d of %d records hold no gold answers (answers: [])", path, ungraded, len(records))
    return records


def question_lines(path: str | Path) -> list[QARecord]:
    """Plain questions, one a line (blank lines skipped), as QA records without gold
    answers. Each id is ``q`` and the start of the question's SHA-256, so it stays the
    same when lines are added, removed or reordered (a resumed collection skips what it
    has); a question repeated on a later line is kept once."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file")
    records: dict[str, QARecord] = {}
    repeated = 0
    for lineno, raw in _numbered_lines(path):
        try:
            question = raw.decode("utf-8").strip()
        except UnicodeDecodeError as exc:
            raise DataFormatError(f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[exc.start]:02x})") from None
        if not question:
            continue
        ident = "q" + hashlib.sha256(question.encode("utf-8")).hexdigest()[:16]
        if ident in records:
            repeated += 1
            continue
        records[ident] = QARecord(ident, question, [])
    if not records:
        raise DataFormatError(f"{path}: holds no questions")
    if repeated:
        logger.info("%s: %d repeated questions kept once", path, repeated)
    return list(records.values())


def load_corpus(path: str | Path) -> list[CorpusRecord]:
    """Load corpus records (``id, title, text``)."""
    return _load(path, _parse_corpus)
