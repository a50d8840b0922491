"""The tests mirror the code: ``adaptive_gates/a/b.py`` is tested in ``tests/a/test_b.py``
(more files for one module: ``tests/a/test_b_<aspect>.py``), so the test of a module is
found by its path. The rule is in tests/README.md."""

from __future__ import annotations

import ast
from pathlib import Path

import adaptive_gates

PACKAGE = Path(adaptive_gates.__file__).parent
TESTS = PACKAGE.parent / "tests"
#: Folders of tests/ that are no module's: helpers, the suites that cut across modules,
#: and the tests of the project itself (layout, demo, docs, the test infrastructure).
NOT_MIRRORED = ("support", "robustness", "project")


def _has_logic(path: Path) -> bool:
    """Whether the module defines a function or a method; a package's ``__init__`` only
    where it defines more than a module ``__getattr__`` (which hands names on)."""
    tree = ast.parse(path.read_text())
    functions = [n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
    if path.name == "__init__.py":
        return any(f.name != "__getattr__" for f in functions)
    return bool(functions)


def _test_path(module: Path, package: Path, tests: Path) -> Path:
    relative = module.relative_to(package)
    stem = "package" if module.name == "__init__.py" else module.stem
    return tests / relative.parent / f"test_{stem}.py"


def missing_tests(package: Path, tests: Path) -> list[str]:
    """The modules of ``package`` with logic and no test file of their name under ``tests``."""
    return [
        str(module.relative_to(package))
        for module in sorted(package.rglob("*.py"))
        if _has_logic(module) and not _test_path(module, package, tests).is_file()
    ]


def unmatched_tests(package: Path, tests: Path) -> list[str]:
    """The test files under ``tests`` (outside ``NOT_MIRRORED``) that name no module of
    ``package``: ``test_b.py`` and ``test_b_<aspect>.py`` name ``b.py`` in the mirrored folder."""
    found = []
    for test in sorted(tests.rglob("test_*.py")):
        relative = test.relative_to(tests)
        if relative.parts[0] in NOT_MIRRORED:
            continue
        folder = package / relative.parent
        name = test.stem.removeprefix("test_")
        modules = {p.stem for p in folder.glob("*.py")} | ({"package"} if (folder / "__init__.py").is_file() else set())
        if not any(name == m or name.startswith(f"{m}_") for m in modules):
            found.append(str(relative))
    return found


def test_every_module_with_logic_has_a_test_file_of_its_name() -> None:
    assert missing_tests(PACKAGE, TESTS) == []


def test_every_test_file_is_named_for_a_module() -> None:
    assert unmatched_tests(PACKAGE, TESTS) == []


def test_the_rule_finds_a_module_without_a_test_and_a_test_without_a_module(tmp_path: Path) -> None:
    package, tests = tmp_path / "pkg", tmp_path / "tests"
    (package / "sub").mkdir(parents=True)
    (tests / "sub").mkdir(parents=True)
    (package / "__init__.py").write_text("def __getattr__(name):\n    raise AttributeError(name)\n")
    (package / "sub" / "__init__.py").write_text('"""A face."""\nfrom .logic import run\n')
    (package / "sub" / "logic.py").write_text("def run():\n    return 1\n")
    (package / "sub" / "table.py").write_text("ROWS = (1, 2)\n")
    (package / "sub" / "other.py").write_text("class Thing:\n    def method(self):\n        return 2\n")
    (tests / "sub" / "test_logic.py").write_text("")
    (tests / "sub" / "test_logic_edge_cases.py").write_text("")
    (tests / "sub" / "test_gone.py").write_text("")
    assert missing_tests(package, tests) == ["sub/other.py"]
    assert unmatched_tests(package, tests) == ["sub/test_gone.py"]
