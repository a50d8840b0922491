"""Gates that ship fitted: ready to decide without outcome records of your own.

Each is fitted on all 3,000 bundled outcome records of one model, Llama-3.1-8B-Instruct
on the six AdaRAGUE tasks (``datasets.adarague_outcomes``), by
``benchmarks/pretrained_gates.py``, which also reports the cross-fitted figures that
say what to expect of it (``benchmarks/results/pretrained_gates.md``):

- ``"draft-check"``: a ``DraftCheckGate`` whose drafts were checked by BM25 (k = 3)
  over a Wikipedia paragraph corpus; give it your LLM as ``chat`` and a
  ``BM25Retriever`` over your corpus as ``retriever`` (another kind of retriever works,
  with a warning: its scores and agreement read differently).
- ``"stacked"``: a ``StackedGate`` that reads the question alone (its wording and its
  MiniLM embedding): no LLM call and no retrieval to decide.

They were fitted on another model's outcomes and on other questions than yours: the
way to do better is ``adaptive-gates collect`` on your own questions and ``fit`` on
what it records.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .gates.base import Gate

#: The shipped gates by name.
PRETRAINED: tuple[str, ...] = ("draft-check", "stacked")
#: How a command line names a shipped gate where it takes a gate's directory.
PREFIX = "pretrained:"
_ROOT = Path(__file__).parent / "bundled" / "pretrained"


def pretrained_path(name: str) -> Path:
    """The directory of the shipped gate ``name`` (``ValueError`` naming those there are)."""
    if name not in PRETRAINED:
        raise ValueError(f"no pretrained gate {name!r}; the package ships {', '.join(PRETRAINED)}")
    return _ROOT / name


def pretrained(name: str, **backends: Any) -> Gate:
    """The shipped gate ``name``, loaded with ``backends`` (``chat``, ``retriever``,
    ``embedder``: those its class takes; see the module).

    Example::

        gate = adaptive_gates.pretrained("draft-check", retriever=BM25Retriever.from_jsonl("corpus.jsonl"))
        decision = gate.decide("Who wrote the novel Dracula?")
    """
    return Gate.load(pretrained_path(name), **backends)


def gate_location(text: str) -> Path:
    """The directory a command line's gate argument names: ``pretrained:<name>`` for a
    shipped gate, else the path as given."""
    if text.startswith(PREFIX):
        return pretrained_path(text[len(PREFIX) :])
    return Path(text)


def is_pretrained(path: Path) -> bool:
    """Whether ``path`` is a shipped gate's directory (which nothing may save over)."""
    return path.resolve().parent == _ROOT.resolve()
