"""How pytest-xdist hands out the tests (``--dist loadscope``: a module's tests stay on
one worker, so its fixtures are built once).

Workers take modules in collection order, slowest first: the long ones start at once
and the short ones fill in behind them, so both workers finish at about the same time
instead of one running the last long module alone. (xdist's own order, most tests
first, would leave a long module of two tests to the end.) Modules that embed the same
question pool through the session's memo run on one worker, which embeds it once. The
list comes from the durations ``make test`` prints (tests/README.md); a module missing
from it only runs later, never less.
"""

from __future__ import annotations

from typing import Any

import pytest

#: The slowest modules of both test sessions, slowest first (paths end with these).
SLOWEST = (
    "tests/gates/test_skr.py",
    "tests/seakr/test_pipeline.py",
    "tests/cli/test_command.py",
    "tests/serve/test_app_page.py",
    "tests/seakr/test_uncertainty.py",
    "tests/gates/base/test_conformance.py",
    "tests/cli/test_collect.py",
    "integrations/langchain/tests/integration_tests/test_examples.py",
    "tests/serve/test_app_milvus.py",
    "tests/cli/test_serve.py",
    "tests/gates/test_verbalized.py",
    "tests/serve/test_app.py",
    "tests/serve/test_keys.py",
    "tests/project/test_demo.py",
    "tests/milvus/test_memory.py",
    "integrations/langchain/tests/integration_tests/test_readme.py",
    "tests/gates/test_logprob.py",
    "tests/gates/base/test_asking.py",
    "integrations/langchain/tests/unit_tests/test_vectorstore_memory.py",
    "tests/models/chat/test_openai_chat.py",
    "tests/gates/test_stacked.py",
    "tests/models/lm/test_prefix_cache.py",
    "integrations/langchain/tests/integration_tests/test_rag_chain.py",
    "tests/robustness/test_persistence_safety.py",
    "tests/models/chat/test_local.py",
    # the LlamaIndex session (its own folder)
    "tests/test_rerank.py",
    "tests/test_readme.py",
    "tests/test_query_engine.py",
    "tests/test_context_chat_engine.py",
    "tests/test_chat_engine.py",
    "tests/test_example_workflow.py",
    "tests/test_example.py",
    "tests/test_selector.py",
    "tests/test_feedback.py",
    "tests/test_core_chat.py",
    "tests/test_offline.py",
)

#: Modules that embed prefixes of one shuffled question pool (``unlabelled_questions``)
#: through ``cached_embedder``: run together, the pool is embedded once, by the first.
SAME_QUESTION_POOL = ("tests/gates/test_skr.py", "tests/gates/test_thrust.py", "tests/memory/test_faiss_index.py")


def _rank(item: pytest.Item) -> int:
    path = item.path.as_posix()
    return next((i for i, slow in enumerate(SLOWEST) if path.endswith("/" + slow)), len(SLOWEST))


def slowest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the slowest modules first, the rest as collected."""
    items.sort(key=_rank)  # stable: each module's tests keep their order


@pytest.hookimpl(optionalhook=True)  # a hook of pytest-xdist, absent from a plain pytest run
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling in collection order, the question-pool modules as one unit."""
    from xdist.scheduler import LoadScopeScheduling

    class SlowestFirst(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            module = nodeid.split("::", 1)[0]
            return SAME_QUESTION_POOL[0] if module in SAME_QUESTION_POOL else super()._split_scope(nodeid)

    if config.getoption("dist") != "loadscope":
        return None  # another mode asked for: xdist's own scheduler
    config.option.loadscopereorder = False  # keep the order ``slowest_first`` gave
    return SlowestFirst(config, log)
