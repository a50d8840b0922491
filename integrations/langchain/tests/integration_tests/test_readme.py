"""Every ``python`` block of the package README runs, in order, in one namespace: the
README reads as one session, each block using what the blocks before it built.

The blocks run against the embedded models and, where the README calls an API model,
against the core suite's OpenAI-compatible test server (``base_url`` and ``model`` are
that server's; the README says to put a real server's there)."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[2] / "README.md"
#: A fenced python block, possibly indented under a list item.
BLOCK = re.compile(r"^(?P<indent> *)```python\n(?P<code>.*?)^(?P=indent)```", re.M | re.S)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def readme_blocks() -> list[tuple[int, str]]:
    """Each python block of the README with the line it starts on."""
    text = README.read_text(encoding="utf-8")
    return [(text.count("\n", 0, m.start()) + 1, textwrap.dedent(m.group("code"))) for m in BLOCK.finditer(text)]


def test_the_readme_has_blocks_to_run():
    assert len(readme_blocks()) >= 8


def test_every_readme_block_runs_in_order(openai_server):
    namespace: dict = {"__name__": "readme", "base_url": openai_server.base_url, "model": openai_server.model_id}
    for line, code in readme_blocks():
        try:
            exec(compile(code, f"{README.name}:{line}", "exec"), namespace)
        except Exception as exc:
            raise AssertionError(f"the README block at line {line} failed: {type(exc).__name__}: {exc}") from exc
