"""The order in which pytest-xdist hands out test modules (``--dist loadscope``: a
module's tests stay on one worker, so its fixtures are built once).

Workers take modules in collection order, so the slowest are put first: the long ones
start at once and the short ones fill in behind them, and both workers finish at about
the same time instead of one running the last long module alone. The list comes from
the durations ``make test`` prints (tests/README.md); a module missing from it only
runs later, never less.
"""

from __future__ import annotations

import pytest

#: The slowest modules of both test sessions, slowest first (paths end with these).
SLOWEST = (
    "integrations/langchain/tests/integration_tests/test_examples.py",
    "tests/test_seakr_pipeline.py",
    "tests/test_skr.py",
    "tests/test_serve_page.py",
    "tests/test_cli.py",
    "tests/test_approximate_memory.py",
    "tests/test_seakr.py",
    "tests/test_thrust.py",
    "tests/test_serve_command.py",
    "tests/test_collect_remote.py",
    "tests/test_serve_milvus.py",
    "tests/test_demo.py",
    "tests/test_verbalized.py",
    "tests/test_serve.py",
    "integrations/langchain/tests/integration_tests/test_readme.py",
    # the LlamaIndex session (its own folder)
    "tests/test_chat_engine.py",
    "tests/test_rerank.py",
    "tests/test_example.py",
    "tests/test_query_engine.py",
    "tests/test_context_chat_engine.py",
    "tests/test_readme.py",
    "tests/test_selector.py",
    "tests/test_example_workflow.py",
)


def _rank(item: pytest.Item) -> int:
    path = item.path.as_posix()
    return next((i for i, slow in enumerate(SLOWEST) if path.endswith("/" + slow)), len(SLOWEST))


def slowest_first(items: list[pytest.Item]) -> None:
    """Reorder ``items`` in place: the slowest modules first, the rest as collected."""
    items.sort(key=_rank)  # stable: each module's tests keep their order
