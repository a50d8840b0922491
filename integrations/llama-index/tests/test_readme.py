"""Every ``python`` block of the package README runs, in order, in one namespace: the
README reads as one session, each block using what the blocks before it built. The
README sets ``Settings`` and adds an event handler to the root dispatcher; both are put
back afterwards, so the other tests see what they set."""

from __future__ import annotations

from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.instrumentation import get_dispatcher

from readme_blocks import run_readme  # the core suite's (pythonpath in pyproject.toml)

README = Path(__file__).resolve().parents[1] / "README.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_every_readme_block_runs_in_order():
    root = get_dispatcher()
    settings, handlers = (Settings._llm, Settings._embed_model), list(root.event_handlers)
    try:
        assert run_readme(README, {"__name__": "readme"}) >= 8
    finally:
        Settings._llm, Settings._embed_model = settings
        root.event_handlers[:] = handlers
