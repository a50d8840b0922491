"""Every ``python`` block of the package README runs as pasted, in order, in one
namespace: the README reads as one session, each block using what the blocks before it
built.

The blocks run against the embedded models and, where the README calls an API model,
against the core suite's OpenAI-compatible test server, named as the README says a
user names theirs: by the ``OPENAI_BASE_URL`` and ``OPENAI_MODEL`` environment
variables."""

from __future__ import annotations

from pathlib import Path

import pytest

from support.readme_blocks import (  # the core suite's (pythonpath in pyproject.toml)
    readme_blocks,
    reply_cap,
    run_readme,
)

README = Path(__file__).resolve().parents[2] / "README.md"
CORE_README = Path(__file__).resolve().parents[4] / "README.md"
DOCS_PAGE = Path(__file__).resolve().parents[4] / "docs" / "langchain.md"

pytestmark = pytest.mark.usefixtures("one_torch_thread")


#: The reply cap of the README's chat models in this test (``llm``, 16 tokens as written, and
#: ``api_llm``, the API model, with none: the test server then writes 64): the blocks check
#: what routes, streams and is recorded, not the answers' words.
MAX_TOKENS = 4


@pytest.fixture
def api_server_in_the_environment(openai_server, monkeypatch):
    """The test server as the README's API-model block finds a user's."""
    monkeypatch.setenv("OPENAI_BASE_URL", openai_server.base_url)
    monkeypatch.setenv("OPENAI_MODEL", openai_server.model_id)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    return openai_server


def test_every_readme_block_runs_in_order(api_server_in_the_environment):
    assert run_readme(README, {"__name__": "readme"}, after_block=reply_cap(MAX_TOKENS, "llm", "api_llm")) >= 12


def test_the_api_model_block_runs_alone(api_server_in_the_environment):
    """The block that calls an API model needs nothing an earlier block built."""
    (line, code), *others = [(line, code) for line, code in readme_blocks(README) if "ChatOpenAI(" in code]
    assert not others
    namespace = {"__name__": "readme"}
    exec(compile(code, f"{README.name}:{line}", "exec"), namespace)
    assert namespace["decision"].gate == "verbalized" and api_server_in_the_environment.requests >= 1


def test_the_top_level_readme_langchain_block_runs_as_pasted():
    """The core README's LangChain snippet, alone in a fresh namespace: it builds all it uses."""
    (block,) = [code for _, code in readme_blocks(CORE_README) if "from langchain_adaptive_gates import" in code]
    namespace: dict = {"__name__": "readme"}
    exec(compile(block, f"{CORE_README.name}:langchain", "exec"), namespace)
    assert (
        namespace["app"].invoke({"question": "Who wrote Hamlet?"})["gate_decision"]["question"] == "Who wrote Hamlet?"
    )


def test_the_docs_langchain_page_runs_in_order():
    """The site's LangChain page (docs/langchain.md), its blocks as one session."""
    namespace: dict = {"__name__": "docs"}
    assert run_readme(DOCS_PAGE, namespace, after_block=reply_cap(MAX_TOKENS, "chat_model")) >= 1
    assert (
        namespace["app"].invoke({"question": "Who wrote Hamlet?"})["gate_decision"]["question"] == "Who wrote Hamlet?"
    )
