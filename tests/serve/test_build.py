"""``serve.build``: the chat service assembled from typed parameters, with the real
embedded models; what does not go together is refused before anything loads."""

from __future__ import annotations

import asyncio
import re
import shutil

import pytest

from adaptive_gates import PopularityGate, SKRKnnGate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.errors import UsageError
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.serve import Limits, build_service
from support.blocked_imports import (
    GIVEN_MODELS,
    MINILM_INSTALL,
    WEIGHT_PACKAGES,
    assert_names_its_package,
    outcomes_without,
)

QUESTION = [{"role": "user", "content": "Who wrote the novel Dracula?"}]


def test_a_fitted_gate_and_a_retriever_given_are_served_as_they_are(
    served_gate_dir, served_corpus, embedder, served_chat_model
):
    gate = SKRKnnGate.load(served_gate_dir, embedder=embedder)
    retriever = BM25Retriever.from_jsonl(served_corpus)
    limits = Limits(max_in_flight=2)
    service = build_service(gate=gate, chat=served_chat_model, retriever=retriever, limits=limits, k=2, max_tokens=4)
    assert service.gate is gate and service.retriever is retriever and service.upstream is served_chat_model
    assert service.limits is limits and service.k == 2 and service.after_feedback is None  # an object: never saved
    answer = asyncio.run(service.answer(QUESTION, {}))
    assert answer.record["decision"]["gate"] == "skr-knn" and answer.usage.completion_tokens <= 4
    assert len(answer.record["passages"]) in {0, 2}


def test_a_saved_gate_is_loaded_and_saved_again_after_feedback_unless_told_not_to(
    served_gate_dir, served_corpus, served_chat_model, tmp_path
):
    directory = shutil.copytree(served_gate_dir, tmp_path / "gate")
    progress: list[str] = []
    service = build_service(
        gate=directory, chat=served_chat_model, retriever="bm25", corpus=str(served_corpus), progress=progress.append
    )
    assert isinstance(service.gate, SKRKnnGate) and isinstance(service.retriever, BM25Retriever)
    assert len(service.retriever) == len(served_corpus.read_text().splitlines())
    assert service.after_feedback is not None
    # a line as each step starts and as it ends: the server is never silent for long while it loads
    steps = ["loading the embedding model", f"indexing the corpus {served_corpus}", "loading the skr-knn gate"]
    assert progress[0] == f"loading the skr-knn gate and the models, indexing the corpus {served_corpus} ..."
    assert len(progress) == 1 + 2 * len(steps)
    for n, step in enumerate(steps):
        assert progress[1 + 2 * n].startswith(step) and progress[1 + 2 * n].endswith(" ...")
        assert re.fullmatch(rf"{re.escape(step)}.*: done in \d+ s", progress[2 + 2 * n])
    kept = build_service(gate=directory, chat=served_chat_model, retriever="bm25", corpus=served_corpus, save=False)
    assert kept.after_feedback is None


def test_what_does_not_go_together_is_refused_before_anything_loads(served_gate_dir, served_corpus, served_chat_model):
    with pytest.raises(UsageError, match="--max-tokens 64 is more than --max-answer-tokens 32"):
        build_service(gate=served_gate_dir, chat=served_chat_model, max_tokens=64, limits=Limits(max_answer_tokens=32))
    with pytest.raises(UsageError, match="a retriever given holds its own"):
        retriever = BM25Retriever.from_jsonl(served_corpus)
        build_service(gate=served_gate_dir, chat=served_chat_model, retriever=retriever, corpus=served_corpus)
    with pytest.raises(UsageError, match="--retriever 'faiss': expected 'dense' or 'bm25'"):
        build_service(gate=served_gate_dir, chat=served_chat_model, retriever="faiss")  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="--shadow-rate: a draft-check gate learns from served pairs"):
        build_service(
            gate=served_gate_dir, chat=served_chat_model, retriever="bm25", corpus=served_corpus, shadow_rate=0.1
        )


def test_a_draft_check_gate_learns_from_verdicts_only_with_a_shadow_learner(served_corpus, served_chat_model):
    """What ``/v1/models`` tells the page (``learns_from_feedback``): the shipped gate
    served alone logs a verdict and never refits on it; with ``--shadow-rate`` it does."""
    served = {"gate": "pretrained:draft-check", "chat": served_chat_model, "retriever": "bm25", "corpus": served_corpus}
    assert build_service(**served).learns is False
    assert build_service(**served, shadow_rate=0.0).learns is True


def test_an_embedding_model_is_built_only_where_something_embeds(tmp_path):
    """A BM25 server over a popularity gate embeds nothing: it starts without the
    MiniLM weight package (a `[serve]`-only install), which a dense retriever needs."""
    gate = tmp_path / "popularity"
    PopularityGate().fit_outcomes(adarague_outcomes("nq")).save(gate)
    setup = GIVEN_MODELS + f"from adaptive_gates.serve import build_service\ngate = {str(gate)!r}\n"
    outcomes = outcomes_without(
        WEIGHT_PACKAGES,
        tmp_path / "blocked",
        setup,
        {
            "bm25": "build_service(gate=gate, chat=EchoChat(), retriever='bm25')",
            "dense": "build_service(gate=gate, chat=EchoChat(), retriever='dense')",
        },
    )
    assert outcomes["bm25"] == {"returned": "ChatService"}
    assert_names_its_package(outcomes["dense"], MINILM_INSTALL)
