"""The saved record of a gate's sentence encoder, checked on load."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError
from adaptive_gates.gates import SKRKnnGate
from adaptive_gates.gates.base.encoder_record import check_encoder_record, encoder_record
from adaptive_gates.models.defaults import MINILM_ID
from adaptive_gates.models.embedding.adapted import AdaptedEmbedder
from adaptive_gates.persistence.saved_format import MAX_DIMENSION


def test_the_record_names_the_encoder_and_the_width(embedder):
    record = encoder_record(embedder, np.int64(384))
    assert record == {"id": embedder.model_id, "dimension": 384}
    assert type(record["dimension"]) is int
    json.dumps(record)  # saved as JSON


def test_a_matching_record_gives_its_width(embedder, tmp_path):
    record = encoder_record(embedder, embedder.dimension)
    assert check_encoder_record(tmp_path, record, embedder) == embedder.dimension
    assert embedder.model_id == MINILM_ID
    assert check_encoder_record(tmp_path, record, None) == embedder.dimension  # None: the embedded MiniLM


@pytest.mark.parametrize(
    "record",
    [
        None,
        "all-MiniLM-L6-v2",
        {"dimension": 384},
        {"id": 7, "dimension": 384},
        {"id": MINILM_ID},
        {"id": MINILM_ID, "dimension": True},
        {"id": MINILM_ID, "dimension": 384.0},
        {"id": MINILM_ID, "dimension": 0},
        {"id": MINILM_ID, "dimension": MAX_DIMENSION + 1},
    ],
)
def test_malformed_records_are_refused(record, tmp_path, embedder):
    with pytest.raises(GateLoadError, match=r"'state.encoder' is missing or malformed"):
        check_encoder_record(tmp_path, record, embedder)


def test_another_encoder_or_width_is_refused(embedder, tmp_path):
    other = AdaptedEmbedder(embedder.embed, "someone/other-encoder", dimension=embedder.dimension)
    saved = encoder_record(other, other.dimension)
    with pytest.raises(GateLoadError, match=r"pass embedder= with that model"):
        check_encoder_record(tmp_path, saved, None)
    with pytest.raises(GateLoadError, match=r"'state.encoder.id' is 'someone/other-encoder'"):
        check_encoder_record(tmp_path, saved, embedder)
    assert check_encoder_record(tmp_path, saved, other) == embedder.dimension
    narrower = encoder_record(embedder, 128)
    with pytest.raises(GateLoadError, match=r"'state.encoder.dimension' is 128"):
        check_encoder_record(tmp_path, narrower, embedder)


def test_a_saved_gate_refuses_to_load_with_another_encoder(embedder, qa_records, tmp_path):
    questions = [r.question for r in qa_records[:12]]
    gate = SKRKnnGate(embedder, k=3).fit(questions, [i % 2 for i in range(12)])
    path = gate.save(tmp_path / "skr")
    state = json.loads((path / "config.json").read_text())["state"]["encoder"]
    assert state == {"id": MINILM_ID, "dimension": embedder.dimension}
    other = AdaptedEmbedder(embedder.embed, "someone/other-encoder", dimension=embedder.dimension)
    with pytest.raises(GateLoadError, match=r"other-encoder"):
        SKRKnnGate.load(path, embedder=other)
    loaded = SKRKnnGate.load(path, embedder=embedder)
    np.testing.assert_allclose(loaded.score(questions[:3]), gate.score(questions[:3]))
