"""Every ``python`` block of the package README runs, in order, in one namespace: the
README reads as one session, each block using what the blocks before it built. The
top-level README's LlamaIndex snippet runs as pasted, alone in a fresh namespace. The
READMEs set ``Settings`` and add an event handler to the root dispatcher; both are put
back afterwards, so the other tests see what they set."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from llama_index.core import Settings
from llama_index.core.instrumentation import get_dispatcher

from support.readme_blocks import (  # the core suite's (pythonpath in pyproject.toml)
    readme_blocks,
    reply_cap,
    run_readme,
)

README = Path(__file__).resolve().parents[1] / "README.md"
TOP_README = Path(__file__).resolve().parents[3] / "README.md"
DOCS_PAGE = Path(__file__).resolve().parents[3] / "docs" / "llamaindex.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: The reply cap of the README's LLM (``llm``, 16 tokens as written) in this test: the
#: blocks check what routes, streams, is recorded and is taught, not the answers' words.
MAX_TOKENS = 4


@pytest.fixture
def settings_put_back() -> Iterator[None]:
    """``Settings`` and the root dispatcher's handlers as they were before the test."""
    root = get_dispatcher()
    settings, handlers = (Settings._llm, Settings._embed_model), list(root.event_handlers)
    try:
        yield
    finally:
        Settings._llm, Settings._embed_model = settings
        root.event_handlers[:] = handlers


@pytest.mark.usefixtures("settings_put_back")
def test_every_readme_block_runs_in_order():
    assert run_readme(README, {"__name__": "readme"}, after_block=reply_cap(MAX_TOKENS)) >= 8


@pytest.mark.usefixtures("settings_put_back")
def test_the_top_level_readmes_llamaindex_snippet_runs_as_pasted(capsys):
    found = [(line, code) for line, code in readme_blocks(TOP_README) if "GateSelector(gate)" in code]
    assert len(found) == 1, f"{len(found)} top-level README blocks build a GateSelector"
    line, code = found[0]
    namespace: dict = {"__name__": "readme"}  # nothing defined before it: the snippet stands alone
    exec(compile(code, f"README.md:{line}", "exec"), namespace)
    assert "GateDecision(" in capsys.readouterr().out
    assert namespace["engine"].gate is namespace["gate"]


@pytest.mark.usefixtures("settings_put_back")
def test_the_docs_llamaindex_page_runs_in_order(capsys):
    """The site's LlamaIndex page (docs/llamaindex.md), its blocks as one session."""
    namespace: dict = {"__name__": "docs"}
    assert run_readme(DOCS_PAGE, namespace, after_block=reply_cap(MAX_TOKENS)) >= 1
    assert "GateDecision(" in capsys.readouterr().out
