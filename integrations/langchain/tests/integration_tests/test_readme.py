"""Every ``python`` block of the package README runs, in order, in one namespace: the
README reads as one session, each block using what the blocks before it built.

The blocks run against the embedded models and, where the README calls an API model,
against the core suite's OpenAI-compatible test server (``base_url`` and ``model`` are
that server's; the README says to put a real server's there)."""

from __future__ import annotations

from pathlib import Path

import pytest

from readme_blocks import readme_blocks, run_readme  # the core suite's (pythonpath in pyproject.toml)

README = Path(__file__).resolve().parents[2] / "README.md"
CORE_README = Path(__file__).resolve().parents[4] / "README.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


#: The reply cap of the README's chat model (``llm``, 16 tokens as written) in this test: the
#: blocks check what routes, streams and is recorded, not the answers' words.
MAX_TOKENS = 8


def _short_replies(namespace: dict) -> None:
    """Caps the replies of the README's ``llm`` once a block has built it (the chains built
    on it share the one object)."""
    if "llm" in namespace and namespace["llm"].max_tokens > MAX_TOKENS:
        namespace["llm"].max_tokens = MAX_TOKENS


def test_every_readme_block_runs_in_order(openai_server):
    namespace = {"__name__": "readme", "base_url": openai_server.base_url, "model": openai_server.model_id}
    assert run_readme(README, namespace, after_block=_short_replies) >= 12


def test_the_top_level_readme_langchain_block_runs_as_pasted():
    """The core README's LangChain snippet, alone in a fresh namespace: it builds all it uses."""
    (block,) = [code for _, code in readme_blocks(CORE_README) if "from langchain_adaptive_gates import" in code]
    namespace: dict = {"__name__": "readme"}
    exec(compile(block, f"{CORE_README.name}:langchain", "exec"), namespace)
    assert (
        namespace["app"].invoke({"question": "Who wrote Hamlet?"})["gate_decision"]["question"] == "Who wrote Hamlet?"
    )
