"""Every ``python`` block of the documentation site (``docs/**/*.md``) runs, as the
README's do: a page's blocks in order, in one namespace (a page reads as one session,
each block using what the blocks before it built). They run in a folder holding the
files the pages name (``outcomes.jsonl``, ``corpus.jsonl``, ``questions.txt``: small
slices of the bundled data), and the user's OpenAI-compatible server they call
(``http://localhost:8000/v1``, ``"my-model"``) is the suite's test server. Shell
commands and fragments are not ``python`` blocks, as in the README. The blocks that need
a live server or database, or a framework, run where ``ELSEWHERE`` says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from adaptive_gates.bundled.datasets import adarague_corpus, adarague_outcomes
from support.readme_blocks import readme_blocks, run_readme

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"

#: A marker a block holds -> the test that runs that block (with a real server, a real
#: Milvus, or in its framework's suite, as the README's own blocks are run).
ELSEWHERE = {
    "x-adaptive-gates-decision": "tests/project/test_readme_serve.py",
    "MilvusMemory.factory": "tests/project/test_readme_serve.py",
    "service.answer(": "tests/project/test_serve_from_python.py",
    "from adaptive_gates.serve import build_service": "tests/project/test_serve_from_python.py",
    "langchain_adaptive_gates": "integrations/langchain/tests/integration_tests/test_readme.py",
    "llama_index": "integrations/llama-index/tests/test_readme.py",
}

#: The user's server and model as the pages name them.
USER_BASE_URL = "http://localhost:8000/v1"
USER_MODEL = '"my-model"'

#: How many bundled records and paragraphs the pages' files hold: enough for a fit and a
#: calibration, few enough to embed in a second or two.
N_OUTCOMES = 120
N_PARAGRAPHS = 300

PAGES = sorted(page for page in DOCS.rglob("*.md") if readme_blocks(page))


def run_elsewhere(code: str) -> bool:
    return any(marker in code for marker in ELSEWHERE)


@pytest.fixture(scope="module")
def page_files() -> dict[str, str]:
    """The files a page's blocks read, by name, as text."""
    outcomes = adarague_outcomes("nq")[:N_OUTCOMES]
    corpus = adarague_corpus()[:N_PARAGRAPHS]
    return {
        "outcomes.jsonl": "".join(json.dumps(record.to_json()) + "\n" for record in outcomes),
        "corpus.jsonl": "".join(
            json.dumps({"id": doc.id, "title": doc.title, "text": doc.text}) + "\n" for doc in corpus
        ),
        "questions.txt": "".join(record.question + "\n" for record in outcomes),
    }


@pytest.mark.parametrize("page", PAGES, ids=lambda page: page.relative_to(DOCS).as_posix())
def test_the_pages_python_blocks_run_in_order(page, page_files, tmp_path, monkeypatch, request):
    for name, text in page_files.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    monkeypatch.chdir(tmp_path)  # blocks save gates where they run
    codes = [code for _, code in readme_blocks(page)]
    server = request.getfixturevalue("openai_server") if any(USER_BASE_URL in code for code in codes) else None

    def rewrite(code: str) -> str | None:
        if run_elsewhere(code):
            return None
        if server is not None:
            code = code.replace(USER_BASE_URL, server.base_url).replace(USER_MODEL, repr(server.model_id))
        return code

    ran = run_readme(page, {"__name__": "docs"}, rewrite=rewrite)
    assert ran or all(run_elsewhere(code) for code in codes)


def test_the_blocks_run_elsewhere_are_there():
    """Each marker of ``ELSEWHERE`` still names a block of the site, so the test it points
    at has a block to run."""
    codes = [code for page in PAGES for _, code in readme_blocks(page)]
    assert all(any(marker in code for code in codes) for marker in ELSEWHERE)
