"""The light core: the local models' packages come with the ``local`` extra, and a
default that needs them says so when they are missing."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from adaptive_gates.errors import MissingExtraError
from adaptive_gates.models.optional import require
from support.readme_blocks import readme_blocks

ROOT = Path(__file__).resolve().parents[2]


def test_require_imports_what_is_installed() -> None:
    assert require("json") is json
    assert require("os.path") is os.path


def test_require_names_the_extra_for_a_missing_module() -> None:
    with pytest.raises(
        ImportError,
        match=r"^adaptive_gates_absent is not installed \(needed for adaptive_gates_absent.sub\); "
        r".*pip install 'adaptive-gates\[local\]'",
    ):
        require("adaptive_gates_absent.sub")
    with pytest.raises(MissingExtraError, match=r"^adaptive_gates_absent is not installed; it comes with the 'local'"):
        require("adaptive_gates_absent")
    with pytest.raises(MissingExtraError, match=r"^adaptive_gates_absent is not installed \(MyThing needs it\); "):
        require("adaptive_gates_absent", needed_for="MyThing")
    with pytest.raises(MissingExtraError, match=r"pip install 'adaptive-gates\[gpu\]'"):
        require("adaptive_gates_absent", extra="gpu")


#: The start of a script for a fresh interpreter where the top-level packages ``ABSENT``
#: cannot be imported.
_HIDING = textwrap.dedent("""
    import importlib.abc, sys

    class Absent(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in ABSENT:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Absent())
""")
_LOCAL = {"torch", "transformers", "sentence_transformers", "gguf", "accelerate"}


def _without(absent: set[str], imports: str, builds: str) -> str:
    """A script where the packages ``absent`` cannot be imported: it runs ``imports``, then
    prints what each of ``builds`` (lambdas) raises."""
    return _HIDING.replace("ABSENT", repr(absent)) + textwrap.dedent("""
        import adaptive_gates
        IMPORTS
        for build in (BUILDS):
            try:
                build()
            except ImportError as exc:
                print(type(exc).__name__, exc)
            else:
                print("built")
    """).replace("IMPORTS", imports).replace("BUILDS", builds)


def _run_light(script: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=ROOT)


_WITHOUT_LOCAL = (
    _without(
        _LOCAL,
        "from adaptive_gates import SelfAwareUncertainty; "
        "from adaptive_gates.models import LocalCausalLM, SentenceEmbedder",
        'lambda: LocalCausalLM().model, lambda: SentenceEmbedder().embed(["a question"]), '
        'lambda: SelfAwareUncertainty().estimate("a question")',
    )
    + 'print(sorted(m for m in sys.modules if m.split(".")[0] in {"torch", "transformers", "sentence_transformers"}))\n'
)


def test_core_imports_without_the_local_extra_and_its_defaults_name_it() -> None:
    run = _run_light(_WITHOUT_LOCAL)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[-1] == "[]"  # nothing of the extra was imported
    assert len(lines) == 4
    for line in lines[:3]:
        assert line.startswith("MissingExtraError ") and "pip install 'adaptive-gates[local]'" in line, line
    assert "torch is not installed (LocalCausalLM needs it)" in lines[0]
    assert "sentence_transformers is not installed (SentenceEmbedder needs it)" in lines[1]
    assert not any("(needed for" in line for line in lines)  # what needs it, not the module again


_WITHOUT_OPENAI_AND_PLOT = _without(
    {"openai", "matplotlib"},
    "from adaptive_gates.evaluation import plot_reports; from adaptive_gates.models import OpenAIChatModel",
    'lambda: OpenAIChatModel("a-model", base_url="http://127.0.0.1:9/v1"), lambda: plot_reports([{}], "curve.png")',
)


def test_openai_and_matplotlib_are_extras_named_when_missing() -> None:
    run = _run_light(_WITHOUT_OPENAI_AND_PLOT)
    assert run.returncode == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0].startswith("MissingExtraError openai is not installed") and "adaptive-gates[openai]" in lines[0]
    assert lines[1].startswith("MissingExtraError matplotlib is not installed") and "adaptive-gates[plot]" in lines[1]


def test_the_readmes_light_core_gate_runs_without_the_local_extra() -> None:
    blocks = [code for _, code in readme_blocks(ROOT / "README.md") if code.startswith("# The light core")]
    assert len(blocks) == 1
    loaded = 'print(sorted(m for m in sys.modules if m.split(".")[0] in ABSENT))\n'
    run = _run_light((_HIDING + blocks[0] + loaded).replace("ABSENT", repr(_LOCAL)))
    assert run.returncode == 0, run.stderr
    assert run.stdout.splitlines() == ["False", "True", "[]"]


def test_the_extras_are_declared_and_local_brings_them() -> None:
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    optional = ("openai", "matplotlib", "fastapi", "uvicorn", "prometheus", "pymilvus", "milvus")
    assert not any(d.startswith(optional) for d in project["dependencies"])
    extras = project["optional-dependencies"]
    assert extras["openai"] == ["openai>=1.40"] and extras["plot"] == ["matplotlib>=3.7"]
    assert "adaptive-gates[openai]" in extras["serve"] and any(d.startswith("fastapi") for d in extras["serve"])
    assert any(d.startswith("pymilvus") for d in extras["milvus"])
    assert any(d.startswith("redis") for d in extras["redis"])
    assert "adaptive-gates[openai,plot,serve,milvus,redis]" in extras["local"]
