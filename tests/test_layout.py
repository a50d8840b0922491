"""The package's layout: which module may import which, and what importing costs."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import adaptive_gates

PACKAGE = Path(adaptive_gates.__file__).parent
#: Loaded on first use only. (scikit-learn is not among them: every gate is a
#: ``sklearn.base.BaseEstimator``.)
HEAVY = ("torch", "transformers", "sentence_transformers")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every adaptive_gates module ``path`` imports when run, at its top or inside a
    function (imports for type checkers only are left out)."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in _runtime_nodes(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.add(target)
            # ``from . import defaults`` imports a module, not a name
            found.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("adaptive_gates")}


def _runtime_nodes(tree: ast.AST):
    """The nodes of ``tree`` outside ``if TYPE_CHECKING:`` blocks (not run at import)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _graph(subpackage: str) -> dict[str, set[str]]:
    files = sorted((PACKAGE / subpackage).glob("*.py"))
    names = {_module_name(f) for f in files}
    return {_module_name(f): _imports(f) & names for f in files if f.name != "__init__.py"}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path, or ``None``."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1  # on the current path
        for nxt in sorted(graph.get(node, set())):
            if state.get(nxt) == 1:
                return path + [nxt]
            if nxt not in state and (found := visit(nxt, path + [nxt])):
                return found
        state[node] = 2  # done: no cycle through it
        return None

    for start in sorted(graph):
        if start not in state and (found := visit(start, [start])):
            return found
    return None


def test_cycle_finder_finds_a_cycle() -> None:
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_models_have_no_import_cycle() -> None:
    graph = _graph("models")
    assert "adaptive_gates.models.local_lm" in graph
    assert _cycle(graph) is None, f"import cycle in adaptive_gates.models: {_cycle(graph)}"


def test_each_models_module_imports_alone() -> None:
    modules = [_module_name(f) for f in sorted((PACKAGE / "models").glob("*.py")) if f.name != "__init__.py"]
    for module in modules:
        done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True)
        assert done.returncode == 0, f"{module}: {done.stderr}"


def test_seakr_building_blocks_do_not_import_the_gates() -> None:
    graph = _graph("seakr")
    blocks = {"uncertainty", "rerank", "reasoning", "prompts", "queries", "trace", "step"}
    for name in blocks:
        imported = _imports(PACKAGE / "seakr" / f"{name}.py")
        assert not {m for m in imported if m.startswith("adaptive_gates.gates")}, name
    assert _cycle(graph) is None


def test_the_gates_do_not_import_the_evaluation() -> None:
    """Evaluation judges gates; a gate that learns from out-of-fold scores takes them
    from ``folds``, the layer below both."""
    for path in sorted((PACKAGE / "gates").glob("*.py")):
        imported = _imports(path)
        assert not {m for m in imported if m.startswith("adaptive_gates.evaluation")}, path.name


def test_importing_the_package_loads_no_heavy_library() -> None:
    code = (
        "import sys, adaptive_gates, adaptive_gates.seakr; "
        f"print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_seakr_pipeline_and_runner_stay_importable_from_the_top() -> None:
    from adaptive_gates import SeaKRPipeline, run_pipeline
    from adaptive_gates.seakr.pipeline import SeaKRPipeline as pipeline_class
    from adaptive_gates.seakr.runner import run_pipeline as runner

    assert SeaKRPipeline is pipeline_class and run_pipeline is runner
    for name in adaptive_gates.__all__:
        assert getattr(adaptive_gates, name) is not None, name
