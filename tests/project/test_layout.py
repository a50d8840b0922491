"""The package's layout: which module may import which, and what importing costs."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import adaptive_gates

PACKAGE = Path(adaptive_gates.__file__).parent
INTEGRATIONS = PACKAGE.parent / "integrations"
#: The core modules a framework package may import from, each only what its ``__all__`` names.
EXTENSION_API = ("adaptive_gates", "adaptive_gates.models", "adaptive_gates.extend")
#: Loaded on first use only.
HEAVY = ("torch", "transformers", "sentence_transformers", "sklearn")


def _module_name(path: Path) -> str:
    parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path, *, typing_too: bool = False) -> set[str]:
    """Every adaptive_gates module ``path`` imports when run, at its top or inside a
    function; with ``typing_too``, also those imported for type checkers only."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree) if typing_too else _runtime_nodes(tree):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.split(".")
            if node.level:
                base = base[: len(base) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if node.module:
                found.add(target)
            # ``from . import defaults`` imports a module, not a name (nor the package's
            # own names: it is being imported already)
            found.update(f"{target}.{a.name}" for a in node.names)
    return {m for m in found if m.startswith("adaptive_gates")}


def _runtime_nodes(tree: ast.AST):
    """The nodes of ``tree`` outside ``if TYPE_CHECKING:`` blocks (not run at import)."""
    for node in ast.iter_child_nodes(tree):
        if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING":
            continue
        yield node
        yield from _runtime_nodes(node)


def _graph(*, typing_too: bool = False) -> dict[str, set[str]]:
    """Which module imports which, across the package (packages' ``__init__`` left out:
    they only gather names)."""
    files = sorted(PACKAGE.rglob("*.py"))
    modules = {_module_name(f) for f in files if f.name != "__init__.py"}
    return {
        _module_name(f): (_imports(f, typing_too=typing_too) & modules) - {_module_name(f)}
        for f in files
        if f.name != "__init__.py"
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path, or ``None``."""
    state: dict[str, int] = {}

    def visit(node: str, path: list[str]) -> list[str] | None:
        state[node] = 1  # on the current path
        for nxt in sorted(graph.get(node, set())):
            if state.get(nxt) == 1:
                return [*path, nxt]
            if nxt not in state and (found := visit(nxt, [*path, nxt])):
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


def test_the_package_has_no_import_cycle() -> None:
    for typing_too in (False, True):
        graph = _graph(typing_too=typing_too)
        assert "adaptive_gates.models.lm.local" in graph
        assert _cycle(graph) is None, f"import cycle: {_cycle(graph)}"


#: The layers, lowest first: a module imports its own layer and those below only. A
#: module's place is its package (``gates``) or, where a package spans two layers, the
#: module itself (``seakr.pipeline``); every module has one.
LAYERS = (
    # records and rules, which everything reads and writes: no backend in them
    (
        "agent_tool",
        "atomic_file",
        "calibration",
        "data",
        "decision",
        "driving",
        "errors",
        "feedback",
        "folds",
        "history_window",
        "listeners",
        "metrics",
        "persistence",
        "prompts",
        "selfknowledge",
        "strict_json",
        "token_logprobs",
        "validation",
    ),
    # backends, and what is read with them
    (
        "models",
        "retrieval",
        "memory",
        "milvus",
        "representers",
        "signals",
        "seakr",
        "answering",
        "collection",
        "datasets",
    ),
    ("gates",),
    # built on the gates
    ("seakr.pipeline", "seakr.routes", "seakr.runner", "evaluation", "serve", "extend", "shipped"),
    # the command and the package's front door
    ("cli", "<package>"),
)


def _layer(module: str) -> int:
    parts = module.split(".")[1:]
    places = [".".join(parts[:2]), parts[0]] if parts else ["<package>"]  # the most specific first
    for place in places:
        for level, names in enumerate(LAYERS):
            if place in names:
                return level
    return -1


def test_no_module_imports_a_layer_above_its_own() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        assert _layer(module) >= 0, f"{module} is in no layer: add its place to LAYERS"
        above = {m for m in _imports(path) if _layer(m) > _layer(module)}
        assert not above, f"{module} imports a layer above its own: {sorted(above)}"


def test_the_layer_rule_catches_an_upward_import() -> None:
    assert _layer("adaptive_gates.seakr.uncertainty") < _layer("adaptive_gates.seakr.gate")
    assert _layer("adaptive_gates.gates.base.gate") < _layer("adaptive_gates.evaluation.offline")
    assert _layer("adaptive_gates.gates.base.folds") < _layer("adaptive_gates.gates.base.gate")
    assert _layer("adaptive_gates.records.data") < _layer("adaptive_gates.models.chat.base")
    assert (
        _layer("adaptive_gates.seakr.uncertainty")
        < _layer("adaptive_gates.seakr.gate")
        < _layer("adaptive_gates.seakr.pipeline")
    )
    assert _layer("adaptive_gates.seakr.pipeline") < _layer("adaptive_gates.cli")


#: Imports each of ``MODULES`` as if alone in one interpreter: before each, every module of
#: the package is forgotten (what they import from elsewhere stays loaded, so torch's
#: import is paid once). Prints the modules that failed, with their tracebacks, as JSON.
_IMPORT_EACH_ALONE = """
import importlib, json, sys, traceback
failed = {}
for module in MODULES:
    for name in [m for m in sys.modules if m.split(".")[0] == "adaptive_gates"]:
        del sys.modules[name]
    try:
        importlib.import_module(module)
    except BaseException:
        failed[module] = traceback.format_exc()
print(json.dumps(failed))
"""


def test_each_models_module_imports_alone() -> None:
    modules = [_module_name(f) for f in sorted((PACKAGE / "models").glob("*.py")) if f.name != "__init__.py"]
    assert len(modules) > 10
    code = _IMPORT_EACH_ALONE.replace("MODULES", repr(modules))
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(done.stdout) == {}


def test_the_import_check_finds_a_module_that_fails_alone() -> None:
    code = _IMPORT_EACH_ALONE.replace(
        "MODULES", repr(["adaptive_gates.models.embedding.embedder", "adaptive_gates.no_such"])
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert list(json.loads(done.stdout)) == ["adaptive_gates.no_such"]


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


def _core_imports(path: Path) -> set[tuple[str, str]]:
    """Each ``(module, name)`` that ``path`` imports from the core (``name`` is
    ``"<module>"`` for a plain ``import``)."""
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "adaptive_gates":
            found.update((node.module or "", a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            found.update((a.name, "<module>") for a in node.names if a.name.split(".")[0] == "adaptive_gates")
    return found


def _outside_the_extension_api(imports: set[tuple[str, str]]) -> set[tuple[str, str]]:
    import importlib

    return {
        (module, name)
        for module, name in imports
        if module not in EXTENSION_API or name not in importlib.import_module(module).__all__
    }


def test_the_framework_packages_import_only_the_extension_api() -> None:
    files = [f for f in sorted(INTEGRATIONS.glob("*/*/**/*.py")) if "tests" not in f.relative_to(INTEGRATIONS).parts]
    assert len(files) > 30
    for path in files:
        outside = _outside_the_extension_api(_core_imports(path))
        assert not outside, (
            f"{path.relative_to(INTEGRATIONS)} imports {sorted(outside)}: name it in adaptive_gates.extend"
        )


def test_the_extension_api_check_finds_a_deep_import(tmp_path: Path) -> None:
    module = tmp_path / "adapter.py"
    module.write_text(
        "from adaptive_gates.extend import drive\n"
        "from adaptive_gates.gates.base.gate import Gate\n"
        "import adaptive_gates.records.data\n"
    )
    assert _outside_the_extension_api(_core_imports(module)) == {
        ("adaptive_gates.gates.base.gate", "Gate"),
        ("adaptive_gates.records.data", "<module>"),
    }
