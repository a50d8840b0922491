"""Old import paths of modules and names that moved, kept working for one release.

Importing an old path (``import adaptive_gates.data``, ``from adaptive_gates.models
import local_lm``...) gives the module at its new place, the same object, with a
``DeprecationWarning`` that names the new path. Names that a package handed on and no
longer does (``adaptive_gates.memory.MilvusMemory``) are looked up the same way by the
package's ``__getattr__`` (``moved_attribute``). Modules are found by name through
``importlib``, so nothing here imports the package at load time.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import warnings
from types import ModuleType

__all__ = ["MODULES", "NAMES", "install", "moved_attribute"]

#: Each old module path and its new one, under ``adaptive_gates.`` (release 0.2 removes them).
MODULES: dict[str, str] = {
    "agent_tool": "answering.agent_tool",
    "atomic_file": "persistence.atomic_file",
    "calibration": "gates.base.calibration",
    "collection": "answering.collection",
    "data": "records.data",
    "datasets": "bundled.datasets",
    "decision": "records.decision",
    "driving": "gates.base.driving",
    "feedback": "gates.base.feedback",
    "folds": "gates.base.folds",
    "history_window": "answering.history_window",
    "listeners": "gates.base.listeners",
    "metrics": "records.answer_metrics",
    "prompts": "answering.prompts",
    "representers": "models.representers",
    "selfknowledge": "records.selfknowledge",
    "shipped": "bundled.shipped",
    "strict_json": "persistence.strict_json",
    "token_logprobs": "records.token_logprobs",
    "validation": "records.validation",
    "gates.agreement_check": "gates.draft_check.agreement_check",
    "gates.asking": "gates.base.asking",
    "gates.assessment": "gates.base.assessment",
    "gates.boosted_trees": "gates.combiner.trees",
    "gates.cold_start": "gates.draft_check.cold_start",
    "gates.conformance": "gates.base.conformance",
    "gates.constraints": "gates.base.constraints",
    "gates.domain_columns": "gates.draft_check.domain_columns",
    "gates.draft_embedding": "gates.draft_check.draft_embedding",
    "gates.encoder_record": "gates.base.encoder_record",
    "gates.fitted_on": "gates.base.fitted_on",
    "gates.given_vectors": "gates.base.given_vectors",
    "gates.params": "gates.base.params",
    "gates.percentile": "gates.base.percentile",
    "gates.saved": "gates.base.saved",
    "gates.seakr": "seakr.gate",
    "gates.shadow_learner": "gates.shadow.learner",
    "gates.shadow_learning": "gates.shadow.learning",
    "gates.stacking": "gates.combiner.logistic",
    "models.adapted_chat": "models.chat.adapted",
    "models.chat_batch": "models.chat.batch",
    "models.chat_stream": "models.chat.stream",
    "models.local_chat": "models.chat.local",
    "models.openai_chat": "models.chat.openai_chat",
    "models.unavailable": "models.chat.unavailable",
    "models.adapted_embedder": "models.embedding.adapted",
    "models.cached_embedder": "models.embedding.cached",
    "models.embedder": "models.embedding.embedder",
    "models.embedding_input": "models.embedding.inputs",
    "models.st_folder": "models.embedding.st_folder",
    "models.onnx_embedder": "models.embedding.onnx.embedder",
    "models.onnx_export": "models.embedding.onnx.export",
    "models.onnx_runner": "models.embedding.onnx.runner",
    "models.local_lm": "models.lm.local",
    "models.loaded_lm": "models.lm.loaded",
    "models.probe": "models.lm.probe",
    "models.prefix_cache": "models.lm.prefix_cache",
    "models.generation": "models.lm.generation",
    "models.token_stream": "models.lm.token_stream",
    "signals.self_report": "answering.self_report",
    "seakr.prompts": "seakr.reasoning_prompt",
}

#: Names a package handed on that now live elsewhere: (package, name) -> new module.
NAMES: dict[tuple[str, str], str] = {
    ("memory", "MilvusMemory"): "milvus.memory",
    ("retrieval", "MilvusRetriever"): "milvus.retrieval",
    ("gates", "SeaKRGate"): "seakr.gate",
}

_PACKAGE = __name__.partition(".")[0]  # adaptive_gates


def _warn(old: str, new: str) -> None:
    warnings.warn(f"{old} moved to {new}; the old path goes in the next release", DeprecationWarning, stacklevel=3)


class _AliasLoader(importlib.abc.Loader):
    """Hands over the module at its new place as the old path's module."""

    def __init__(self, new: str) -> None:
        self._new = new
        self._spec: importlib.machinery.ModuleSpec | None = None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType:
        module = importlib.import_module(self._new)
        self._spec = module.__spec__
        return module

    def exec_module(self, module: ModuleType) -> None:
        """Nothing to run: the module ran at its new place. The import system gave it
        the old path's spec meanwhile; it gets its own back, so that relative imports
        inside it, ``importlib.reload`` and ``__spec__.name`` keep the new path."""
        module.__spec__ = self._spec


class _MovedModuleFinder(importlib.abc.MetaPathFinder):
    """Finds the old module paths of ``MODULES``."""

    def find_spec(
        self, fullname: str, path: object = None, target: object = None
    ) -> importlib.machinery.ModuleSpec | None:
        prefix = f"{_PACKAGE}."
        old = fullname[len(prefix) :] if fullname.startswith(prefix) else None
        if old not in MODULES:
            return None
        new = f"{prefix}{MODULES[old]}"
        _warn(fullname, new)
        return importlib.machinery.ModuleSpec(fullname, _AliasLoader(new))


def install() -> None:
    """Let the old module paths be imported (once per interpreter)."""
    if not any(isinstance(finder, _MovedModuleFinder) for finder in sys.meta_path):
        sys.meta_path.append(_MovedModuleFinder())


def moved_attribute(package: str, name: str) -> object:
    """The object ``name`` that ``package`` (``adaptive_gates.memory``) handed on, from
    its new module, with a ``DeprecationWarning``; ``AttributeError`` if it never did."""
    short = package[len(_PACKAGE) + 1 :]
    if (short, name) not in NAMES:
        raise AttributeError(f"module {package!r} has no attribute {name!r}")
    new = f"{_PACKAGE}.{NAMES[short, name]}"
    _warn(f"{package}.{name}", f"{new}.{name}")
    return getattr(importlib.import_module(new), name)
