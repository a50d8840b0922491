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


#: The package's floors, lowest first: the folders (and the public face's files) of
#: ``adaptive_gates``. A module imports from its own floor and the floors below only.
FLOORS = (
    "errors",  # the exception tree every floor raises
    "moved",  # old import paths, found by name only
    "persistence",  # the checked format of a saved directory, whole-file writes, strict JSON
    "records",  # decisions, outcome records, metrics, self-knowledge labels, input checks
    "models",  # chat models, embedders, the causal LM
    "signals",  # what a gate reads of a question, a draft or its tokens
    "memory",  # SKR's memory of labelled questions
    "retrieval",  # BM25 and dense retrievers
    "answering",  # answering with or without passages, prompts, collecting outcomes
    "gates",  # the methods, their contract (base) and the learning they share (combiner)
    "milvus",  # the SKR memory and the corpus in Milvus
    "seakr",  # SeaKR: its gate, re-ranker, selector and multi-hop pipeline
    "evaluation",  # gap capture, curves, reports
    "bundled",  # the data and the fitted gates that install with the package
    "serve",  # the OpenAI-compatible server
    "extend",  # what framework packages build on
    "cli",  # the command
    "<package>",  # the front door (``adaptive_gates/__init__.py``)
)


def _floor(module: str) -> int:
    """The floor of ``module``: the index in ``FLOORS`` of its first name under the package."""
    parts = module.split(".")[1:]
    return FLOORS.index(parts[0] if parts else "<package>")


def _children_graph(folder: str, graph: dict[str, set[str]]) -> dict[str, set[str]]:
    """The imports between the children (files and folders) of ``folder``, as the
    picture of that folder draws them: one arrow from child to child."""
    prefix = f"{folder}."
    arrows: dict[str, set[str]] = {}
    for module, imported in graph.items():
        if not module.startswith(prefix):
            continue
        child = module[len(prefix) :].split(".")[0]
        for other in imported:
            if other.startswith(prefix) and (target := other[len(prefix) :].split(".")[0]) != child:
                arrows.setdefault(child, set()).add(target)
    return arrows


def test_every_folder_and_face_file_has_a_floor() -> None:
    names = {
        p.stem if p.is_file() else p.name
        for p in PACKAGE.iterdir()
        if p.suffix == ".py" or (p / "__init__.py").is_file()
    }
    assert names - {"__init__"} == set(FLOORS) - {"<package>"}
    assert sorted(p.name for p in PACKAGE.glob("*.py")) == ["__init__.py", "errors.py", "extend.py"]


def test_no_module_imports_a_floor_above_its_own() -> None:
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path)
        above = {m for m in _imports(path, typing_too=True) if _floor(m) > _floor(module)}
        assert not above, f"{module} imports a floor above its own: {sorted(above)}"


def test_no_import_runs_back_up_inside_any_folder() -> None:
    """In every folder, its files and subfolders import each other in one direction
    only: no two children reach each other, at any depth."""
    graph = _graph(typing_too=True)
    folders = sorted(_module_name(p) for p in PACKAGE.rglob("__init__.py"))
    assert "adaptive_gates.gates.base" in folders
    for folder in folders:
        children = _children_graph(folder, graph)
        assert _cycle(children) is None, f"in {folder}: {' -> '.join(_cycle(children) or [])}"


def test_the_floor_rules_catch_an_upward_import() -> None:
    assert _floor("adaptive_gates.records.data") < _floor("adaptive_gates.models.chat.base")
    assert _floor("adaptive_gates.seakr.uncertainty") > _floor("adaptive_gates.gates.base.gate")
    assert _floor("adaptive_gates.gates.base.gate") < _floor("adaptive_gates.evaluation.offline")
    assert _floor("adaptive_gates.cli.command") < _floor("adaptive_gates")
    # a folder whose children import each other in a circle
    graph = {"p.a.x": {"p.b.y"}, "p.b.y": {"p.a.z"}, "p.a.z": set()}
    assert _cycle(_children_graph("p", graph)) == ["a", "b", "a"]
    assert _cycle(_children_graph("p.a", graph)) is None


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
    modules = [_module_name(f) for f in sorted((PACKAGE / "models").rglob("*.py")) if f.name != "__init__.py"]
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
