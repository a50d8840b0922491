"""Gates that ship fitted: ready to decide without outcome records of your own.

Each is fitted on all 3,000 bundled outcome records of **one model,
Llama-3.1-8B-Instruct** (``SHIPPED_MODEL``), on the six AdaRAGUE tasks
(``datasets.adarague_outcomes``), by ``benchmarks/fit_pretrained.py``; what to expect of
each on questions it never saw is ``benchmarks/results/adarague_gates.md``:

- ``"draft-check"``: a ``DraftCheckGate`` whose drafts (Llama's plain answers without
  retrieval) were checked by BM25 (k = 3) over a Wikipedia paragraph corpus; give it
  your LLM as ``chat`` and a ``BM25Retriever`` over your corpus as ``retriever``
  (another kind of retriever works, with a warning: its scores and agreement read
  differently).
- ``"stacked"``: a ``StackedGate`` that reads the question alone (its wording and its
  MiniLM embedding): no LLM call and no retrieval to decide.

A gate learns which questions *one* model gets wrong: on another model's answers the
shipped draft-check's weights were at chance. So ``pretrained("draft-check", ...)``
with a chat model other than Llama-3.1-8B-Instruct (or one whose model it cannot tell,
or none: the embedded SmolLM2 then drafts) warns and returns the *cold-start* gate
(``DraftCheckGate(cold_start=True, self_report=True)``, same retriever, k and
embedder): it decides from what the model says about itself (an abstention, its
stated doubt), which carried over where weights did not. ``keep_fit=True`` keeps the
Llama fit anyway. The way to do better than either is ``adaptive-gates collect`` on your
own questions and ``fit`` on what it records.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from ..gates.base.fitted_on import same_model
from ..gates.base.gate import Gate

logger = logging.getLogger(__name__)

#: The shipped gates by name.
PRETRAINED: tuple[str, ...] = ("draft-check", "stacked")
#: The model whose outcomes every shipped gate is fitted on.
SHIPPED_MODEL = "meta-llama/Llama-3.1-8B-Instruct"
#: How a command line names a shipped gate where it takes a gate's directory.
PREFIX = "pretrained:"
_ROOT = Path(__file__).parent / "pretrained"


def pretrained_path(name: str) -> Path:
    """The directory of the shipped gate ``name`` (``ValueError`` naming those there are)."""
    if name not in PRETRAINED:
        raise ValueError(f"no pretrained gate {name!r}; the package ships {', '.join(PRETRAINED)}")
    return _ROOT / name


def pretrained(name: str, *, keep_fit: bool = False, **backends: Any) -> Gate:
    """The shipped gate ``name``, fitted on Llama-3.1-8B-Instruct's outcomes, loaded
    with ``backends`` (``chat``, ``retriever``, ``embedder``: those its class takes).

    For ``"draft-check"`` the drafting model matters: unless ``chat`` is
    Llama-3.1-8B-Instruct (by its ``model_id``), a warning says whose fit this is and
    the cold-start gate is returned instead (see the module), or the fitted one with
    ``keep_fit=True``. A chat model whose ``model_id`` is empty counts as another
    model: the cold start is the rule that holds whatever the model.

    A backend left out is the embedded default (MiniLM, SmolLM2): its weight package
    must be installed, or a ``MissingModelPackageError`` names the command that
    installs it (the gate is not returned, to fall back on every question).

    Example::

        retriever = BM25Retriever.from_jsonl("corpus.jsonl")
        gate = adaptive_gates.pretrained("draft-check", chat=my_chat, retriever=retriever)
        decision = gate.decide("Who wrote the novel Dracula?")
    """
    gate = Gate.load(pretrained_path(name), **backends)
    if "chat" in gate.backend_params and backends.get("chat") is None:
        from ..models.embedded import embedded_smollm2_gguf

        embedded_smollm2_gguf()  # the embedded SmolLM2 would draft: a missing weight package is said now
    if name != "draft-check":
        logger.info("%s: fit one on your own model's outcomes to do better for it", fitted_statement(name))
        return gate
    serving = _drafting_model(backends.get("chat"))
    if same_model(fitted_model(gate), serving) is True:
        return gate
    if keep_fit:
        logger.warning("%s; keeping that fit (keep_fit=True)", pretrained_notice(name, serving))
        return gate
    logger.warning(
        "%s; returning the cold-start gate, which decides from the model's own abstentions and stated "
        "doubt (pass keep_fit=True to keep the Llama fit)",
        pretrained_notice(name, serving),
    )
    params = {**gate.get_params(deep=False), "cold_start": True, "self_report": True, "agreement": "auto"}
    return type(gate)(**params)


def fitted_model(gate: Gate) -> str:
    """The model a shipped gate was fitted on (its ``fitted_on_``, else ``SHIPPED_MODEL``:
    gates shipped before they recorded it were fitted on that model's outcomes too)."""
    recorded = gate.fitted_on_.model if gate.fitted_on_ is not None else None
    return recorded or SHIPPED_MODEL


def fitted_statement(name: str) -> str:
    """Whose outcomes the shipped gate ``name`` holds, in words."""
    return f"pretrained:{name} is fitted on outcomes of {SHIPPED_MODEL}"


def pretrained_notice(name: str, serving: str | None) -> str:
    """One line saying whose outcomes the shipped gate ``name`` holds, and, given the
    model it now serves (``serving``), whether that is the same model."""
    fitted = fitted_statement(name)
    if serving is None:
        return (
            f"{fitted}; the chat model it now serves names no model, so whether it is that one cannot be told: "
            "on another model's answers its weights may be no better than chance"
        )
    if same_model(SHIPPED_MODEL, serving):
        return f"{fitted}, the model it now serves ({serving})"
    return (
        f"{fitted}, not of {serving}, the model it now serves: on another model's answers its weights may be no "
        "better than chance; fit it on your own model's outcomes (adaptive-gates collect, then fit)"
    )


def _drafting_model(chat: Any) -> str | None:
    """The id of the model a draft-check gate would draft with: ``chat``'s, or the
    embedded SmolLM2's when none is given (``None``: the chat model names none)."""
    if chat is None:
        from ..models.embedded import SMOLLM2_ID

        return SMOLLM2_ID
    model_id = getattr(chat, "model_id", None)
    return model_id if isinstance(model_id, str) and model_id.strip() else None


def gate_location(text: str) -> Path:
    """The directory a command line's gate argument names: ``pretrained:<name>`` for a
    shipped gate, else the path as given."""
    if text.startswith(PREFIX):
        return pretrained_path(text[len(PREFIX) :])
    return Path(text)


def is_pretrained(path: Path) -> bool:
    """Whether ``path`` is a shipped gate's directory (which nothing may save over)."""
    return path.resolve().parent == _ROOT.resolve()
