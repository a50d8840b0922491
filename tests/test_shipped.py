"""The gates the package ships fitted load from the installed package, decide with a
user's own backends (the embedded SmolLM2, BM25 over real Wikipedia passages that
install with the package set), and are named on the command line as
``pretrained:<name>``; nothing saves over them."""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pytest

import adaptive_gates
from adaptive_gates import DraftCheckGate, StackedGate, pretrained
from adaptive_gates.cli.files import saved_gate
from adaptive_gates.datasets import adarague_outcomes
from adaptive_gates.models import LocalChatModel
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.shipped import PRETRAINED, is_pretrained, pretrained_path
from shared_data import packaged_wiki_paragraphs

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def retriever() -> BM25Retriever:
    return BM25Retriever.from_records(packaged_wiki_paragraphs()[:300])


def test_the_package_ships_its_fitted_gates_as_saved_directories():
    assert adaptive_gates.PRETRAINED == PRETRAINED
    for name in PRETRAINED:
        assert (pretrained_path(name) / "config.json").is_file(), name
        assert is_pretrained(pretrained_path(name))
    with pytest.raises(ValueError, match="no pretrained gate 'nope'; the package ships draft-check"):
        pretrained("nope")


def test_the_shipped_draft_check_gate_decides_with_the_users_backends(retriever, lm, cached_embedder):
    gate = pretrained("draft-check", chat=LocalChatModel(lm), retriever=retriever, embedder=cached_embedder)
    assert isinstance(gate, DraftCheckGate) and gate.is_fitted
    question = "Is ethanol fuel energy efficient to produce?"
    decision = gate.decide(question)
    assert decision.error is None and decision.gate == "draft-check"
    assert decision.passages == tuple(retriever.search(question, 3))
    assert decision.answer_without_retrieval == decision.details["draft"]
    # offline, on the outcomes it was fitted on: it reads every draft and ranks them
    records = adarague_outcomes("nq")[:40]
    scores = gate.score_records(records)
    assert scores.shape == (40,) and np.all((scores >= 0) & (scores <= 1)) and len(set(scores)) > 1


def test_the_command_line_names_a_shipped_gate():
    assert saved_gate("pretrained:draft-check") == pretrained_path("draft-check")
    assert saved_gate("some/dir") == Path("some/dir")
    with pytest.raises(argparse.ArgumentTypeError, match="no pretrained gate 'other'"):
        saved_gate("pretrained:other")
    assert not is_pretrained(pretrained_path("draft-check").parent)


def test_the_shipped_stacked_gate_reads_the_question_alone(cached_embedder):
    gate = pretrained("stacked", embedder=cached_embedder)
    assert isinstance(gate, StackedGate) and gate.members_ == {} and gate.embedding
    decisions = gate.decide_batch(["Who wrote the novel Dracula?", "Which river flows through the city of Ulm?"])
    for decision in decisions:
        assert decision.error is None and decision.passages is None and decision.llm_calls is None
        assert 0.0 <= decision.score <= 1.0
