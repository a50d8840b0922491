"""The distribution's LlamaHub metadata names what the package really exports."""

from __future__ import annotations

import importlib
import inspect
import re
import tomllib
from pathlib import Path

from llama_index.core.base.base_query_engine import BaseQueryEngine
from llama_index.core.base.base_selector import BaseSelector
from llama_index.core.base.embeddings.base import BaseEmbedding
from llama_index.core.chat_engine.types import BaseChatEngine
from llama_index.core.llms.llm import LLM
from llama_index.core.postprocessor.types import BaseNodePostprocessor
from llama_index.core.retrievers import BaseRetriever
from llama_index.core.tools.types import BaseTool
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
    "tools",
    "packs",
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
    BaseTool,
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
    assert {
        "GateSelector",
        "SeaKRRerank",
        "AdaptiveQueryEngine",
        "AdaptiveGatesLLM",
        "GatedRetrieverTool",
    } <= components
    assert "AdaptiveRAGPack" in listed  # a pack has no component base: listed by name


def test_every_kind_is_listed_with_its_classes():
    """Each of the namespaces is in ``[tool.llamahub.kinds]`` with exactly its
    exported components, and those are the classes ``class_authors`` names."""
    llamahub = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["tool"]["llamahub"]
    kinds = llamahub["kinds"]
    assert list(kinds) == [f"llama_index.{kind}.adaptive_gates" for kind in KINDS]
    for path, classes in kinds.items():
        module = importlib.import_module(path)
        exported = {n: getattr(module, n) for n in module.__all__}
        components = {n for n, cls in exported.items() if inspect.isclass(cls) and issubclass(cls, COMPONENTS)}
        assert set(classes) <= set(exported), f"{path} does not export {sorted(set(classes) - set(exported))}"
        assert components <= set(classes), f"{path}: components not listed: {sorted(components - set(classes))}"
    listed = [name for classes in kinds.values() for name in classes]
    assert sorted(listed) == sorted(llamahub["class_authors"])


def test_the_project_has_authors_keywords_and_links_that_resolve_where_declared():
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    assert project["authors"] and all(author["name"] for author in project["authors"])
    assert {"llama-index", "rag", "retriever", "reranker"} <= set(project["keywords"])
    readme = (PYPROJECT.parent / "README.md").read_text(encoding="utf-8")
    links = re.findall(r"\]\(([^)\s]+)\)", readme)
    repository = project.get("urls", {}).get("Repository")
    if repository is not None:  # links a package page can follow
        assert all(link.startswith(("https://", "#")) for link in links), links
    else:  # relative to the repository, and the README says so
        assert "declares no repository URL" in readme
        for link in (link for link in links if not link.startswith(("https://", "#"))):
            assert (PYPROJECT.parent / link).exists(), f"the relative link {link} resolves to nothing"
