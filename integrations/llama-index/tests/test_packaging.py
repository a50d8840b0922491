"""The distribution's LlamaHub metadata names what the package really exports."""

from __future__ import annotations

import importlib
import inspect
import tomllib
from pathlib import Path

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_selector import BaseSelector
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms.llm import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.workflow import Workflow

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"
KINDS = (
    "llms",
    "embeddings",
    "vector_stores",
    "selectors",
    "query_engine",
    "postprocessor",
    "retrievers",
    "workflows",
)
#: The LlamaIndex component bases LlamaHub lists classes of.
COMPONENTS = (
    BaseSelector,
    BaseNodePostprocessor,
    BaseQueryEngine,
    BaseChatEngine,
    LLM,
    BaseEmbedding,
    BaseRetriever,
    Workflow,
)


def _exported() -> dict[str, type]:
    """Every class the namespaces export, by name."""
    found: dict[str, type] = {}
    for kind in KINDS:
        module = importlib.import_module(f"llama_index.{kind}.adaptive_gates")
        found.update({n: getattr(module, n) for n in module.__all__ if inspect.isclass(getattr(module, n))})
    return found


def test_the_llamahub_metadata_names_exported_classes_and_every_component():
    llamahub = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["llamahub"]
    assert llamahub["contains_example"] is False
    assert "GateSelector" in importlib.import_module(llamahub["import_path"]).__all__
    exported = _exported()
    listed = set(llamahub["class_authors"])
    assert listed <= set(exported), f"listed but not exported: {sorted(listed - set(exported))}"
    components = {name for name, cls in exported.items() if issubclass(cls, COMPONENTS)}
    assert components <= listed, f"components missing from class_authors: {sorted(components - listed)}"
    assert {"GateSelector", "SeaKRRerank", "AdaptiveQueryEngine", "AdaptiveGatesLLM"} <= components
