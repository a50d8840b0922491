"""The draft-check gate's ``draft_embedding`` option (``gates.draft_embedding``), on
real parts: the bundled Llama-3.1-8B HotpotQA outcomes, BM25 over their own
paragraphs, the real MiniLM embedding the drafts, the embedded SmolLM2 drafting where
the gate decides."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import numpy as np
import pytest

from adaptive_gates import DraftCheckGate, Gate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.errors import GateLoadError
from adaptive_gates.models import LocalChatModel
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TRAIN, TEST, DIMS = 200, 40, 6


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + TEST]


@pytest.fixture(scope="module")
def retriever(records) -> BM25Retriever:
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return BM25Retriever.from_records([CorpusRecord(f"h{i}", t, x) for i, (t, x) in enumerate(unique)])


@pytest.fixture(scope="module")
def fitted(records, retriever, cached_embedder, lm) -> DraftCheckGate:
    gate = DraftCheckGate(
        LocalChatModel(lm),
        retriever,
        cached_embedder,
        embedding=False,
        draft_embedding=True,
        draft_embedding_dims=DIMS,
        max_tokens=8,
    )
    return gate.fit_outcomes(records[:TRAIN])


def _edit_config(path, edit):
    """Change config.json and sign it again, as only a forger (or an older version) would."""
    config = json.loads((path / CONFIG_FILE).read_text())
    edit(config)
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))


def test_the_drafts_embedding_joins_the_columns_and_what_the_draft_says_counts(fitted, records):
    names = fitted.combiner_.feature_names
    assert names[: len(fitted.columns)] == fitted.columns
    assert names[len(fitted.columns) :] == tuple(f"draft_pc{i}" for i in range(DIMS))
    held_out = records[TRAIN:]
    scores = fitted.score_records(held_out)
    assert np.all(np.isfinite(scores))
    # the same form (a capitalised name of two words, found in no passage), another meaning
    named = [replace(r, pred_no_retrieval="Ludwig Wittgenstein") for r in held_out[:10]]
    dated = [replace(r, pred_no_retrieval="March 1953") for r in held_out[:10]]
    assert not np.array_equal(fitted.score_records(named), fitted.score_records(dated))


def test_a_decision_embeds_its_own_draft(fitted, records):
    decision = fitted.decide(records[TRAIN].question)
    assert decision.error is None and math.isfinite(decision.score)


def test_a_saved_gate_keeps_the_projection_and_refuses_one_that_does_not_fit(fitted, records, retriever, tmp_path):
    path = fitted.save(tmp_path / "gate")
    state = json.loads((path / CONFIG_FILE).read_text())["state"]
    assert state["draft_projection"] == {"dims": DIMS, "width": 384}
    assert state["encoder"]["dimension"] == 384  # recorded for the drafts' encoder alone
    loaded = Gate.load(path, retriever=retriever, embedder=fitted.embedder)
    np.testing.assert_array_equal(loaded.score_records(records[TRAIN:]), fitted.score_records(records[TRAIN:]))
    _edit_config(path, lambda c: c["state"]["draft_projection"].update(dims=DIMS + 1))
    with pytest.raises(GateLoadError, match=r"file 'draft_projection_components\.npy' must hold \(7, 384\)"):
        Gate.load(path, retriever=retriever, embedder=fitted.embedder)
    _edit_config(path, lambda c: c["params"].update(draft_embedding=False))
    with pytest.raises(
        GateLoadError, match=r"'state\.draft_projection' is set, but 'params\.draft_embedding' is false"
    ):
        Gate.load(path, retriever=retriever, embedder=fitted.embedder)
