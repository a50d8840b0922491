"""Every ``python`` block of the package README runs, in order, in one namespace: the
README reads as one session, each block using what the blocks before it built.

The blocks run against the embedded models and, where the README calls an API model,
against the core suite's OpenAI-compatible test server (``base_url`` and ``model`` are
that server's; the README says to put a real server's there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from readme_blocks import run_readme  # the core suite's (pythonpath in pyproject.toml)

README = Path(__file__).resolve().parents[2] / "README.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_every_readme_block_runs_in_order(openai_server):
    namespace = {"__name__": "readme", "base_url": openai_server.base_url, "model": openai_server.model_id}
    assert run_readme(README, namespace) >= 12
