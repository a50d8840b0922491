"""Representers: an LM's pooled hidden layer, a sentence embedding, and what a saved
gate records to rebuild them."""

from __future__ import annotations

import numpy as np
import pytest

from adaptive_gates.models.embedded import MINILM_ID, SMOLLM2_ID
from adaptive_gates.models.embedding.cached import CachedEmbedder
from adaptive_gates.models.protocols import Embedder
from adaptive_gates.models.representers import (
    CachedRepresenter,
    EmbedderRepresenter,
    LMHiddenStateRepresenter,
    Representer,
    describe,
    rebuild_embedded,
)

QUESTIONS = ["Who wrote Hamlet?", "What is the boiling point of water in Kelvin?"]


class WordCount:
    """A representer of one's own, without settings."""

    model_id = "word-count"
    dimension = 1

    def embed(self, texts):
        return np.array([[len(t.split())] for t in texts], dtype=np.float32)


@pytest.fixture(scope="module")
def last_layer(lm, one_torch_thread):
    return LMHiddenStateRepresenter(lm)


def test_an_lm_layer_is_a_representer(last_layer, lm):
    assert isinstance(last_layer, Representer) and Representer is Embedder
    assert last_layer.layer_index == lm.num_layers == 30
    assert last_layer.dimension == lm.hidden_size == 576
    assert last_layer.model_id == f"{SMOLLM2_ID} [hidden layer 30, last_token, raw]"
    assert repr(last_layer) == "LMHiddenStateRepresenter(layer=-1, pooling='last_token', chat_template=False)"


def test_its_vectors_are_the_lms_pooled_hidden_states(last_layer, lm):
    vectors = last_layer.embed(QUESTIONS)
    assert vectors.shape == (2, 576) and vectors.dtype == np.float32
    states = lm.hidden_states(QUESTIONS, layers=[-1], pooling="last_token", formatted=True)
    np.testing.assert_allclose(vectors, states[:, 0, :], atol=1e-5)


def test_layer_pooling_and_form_each_give_another_representation(lm, last_layer):
    base = last_layer.embed(QUESTIONS[:1])
    others = [
        LMHiddenStateRepresenter(lm, layer=5),
        LMHiddenStateRepresenter(lm, pooling="mean"),
        LMHiddenStateRepresenter(lm, chat_template=True),
    ]
    ids = {last_layer.model_id}
    for other in others:
        assert not np.allclose(other.embed(QUESTIONS[:1]), base, atol=1e-3)
        ids.add(other.model_id)
    assert len(ids) == 4
    assert others[2].model_id.endswith("last_token, chat]")


def test_the_last_layer_by_either_index_is_one_representation(lm, last_layer):
    by_index = LMHiddenStateRepresenter(lm, layer=30)
    assert by_index.model_id == last_layer.model_id
    np.testing.assert_allclose(by_index.embed(QUESTIONS[:1]), last_layer.embed(QUESTIONS[:1]), atol=1e-6)


def test_a_layer_out_of_range_is_refused_when_read(lm):
    representer = LMHiddenStateRepresenter(lm, layer=31)
    with pytest.raises(ValueError, match="layer 31 is out of range"):
        _ = representer.model_id
    with pytest.raises(ValueError, match="out of range"):
        _ = LMHiddenStateRepresenter(lm, layer=-32).layer_index
    assert LMHiddenStateRepresenter(lm, layer=-31).layer_index == 0  # the token embeddings


@pytest.mark.parametrize(
    ("kwargs", "named"),
    [
        ({"layer": 1.0}, "layer"),
        ({"layer": True}, "layer"),
        ({"pooling": "max"}, "pooling"),
        ({"max_length": 0}, "max_length"),
        ({"batch_size": True}, "batch_size"),
        ({"batch_size": -2}, "batch_size"),
    ],
)
def test_bad_settings_are_refused_at_once(kwargs, named):
    with pytest.raises(ValueError, match=named):
        LMHiddenStateRepresenter(**kwargs)


def test_a_single_string_is_refused_not_represented_by_character(last_layer):
    with pytest.raises(TypeError, match="not a single string"):
        last_layer.embed("Who wrote Hamlet?")


def test_truncation_keeps_only_the_first_tokens(lm):
    short = LMHiddenStateRepresenter(lm, pooling="mean", max_length=4)
    a, b = short.embed(["The capital of France is Paris", "The capital of France was Rome"])
    np.testing.assert_allclose(a, b, atol=1e-5)  # the first four tokens are the same
    c = short.embed(["Where is the capital of France?"])[0]
    assert not np.allclose(a, c, atol=1e-3)


def test_a_sentence_embedding_is_a_representer_as_it_is(embedder):
    own = WordCount()
    assert EmbedderRepresenter(own) is own
    assert EmbedderRepresenter() is embedder  # the embedded MiniLM
    assert CachedRepresenter is CachedEmbedder


def test_describe_records_id_dimension_and_settings(last_layer, embedder):
    assert describe(embedder) == {
        "id": MINILM_ID,
        "dimension": 384,
        "settings": {"kind": "embedder", "embedder": MINILM_ID},
    }
    assert describe(last_layer) == {
        "id": last_layer.model_id,
        "dimension": 576,
        "settings": {
            "kind": "lm-hidden-state",
            "lm": SMOLLM2_ID,
            "layer": 30,
            "pooling": "last_token",
            "max_length": 256,
            "chat_template": False,
        },
    }
    assert describe(WordCount()) == {"id": "word-count", "dimension": 1, "settings": None}


def test_embedded_representers_are_rebuilt_from_their_record(embedder, lm):
    assert rebuild_embedded(describe(embedder)) is embedder
    original = LMHiddenStateRepresenter(lm, layer=12, pooling="mean", max_length=64, chat_template=True)
    rebuilt = rebuild_embedded(describe(original))
    assert isinstance(rebuilt, LMHiddenStateRepresenter)
    assert rebuilt.lm is lm  # the process-wide SmolLM2
    assert describe(rebuilt) == describe(original)
    np.testing.assert_allclose(rebuilt.embed(QUESTIONS[:1]), original.embed(QUESTIONS[:1]), atol=1e-6)


@pytest.mark.parametrize(
    "record",
    [
        {"id": "word-count", "dimension": 1, "settings": None},
        {"id": "x", "dimension": 3},
        {"settings": {"kind": "embedder", "embedder": "another/model"}},
        {"settings": {"kind": "lm-hidden-state", "lm": "another-lm", "layer": 1}},
        {"settings": {"kind": "something else"}},
        {"settings": "embedder"},
    ],
)
def test_other_models_are_not_rebuilt(record):
    assert rebuild_embedded(record) is None


def test_a_malformed_embedded_record_raises():
    with pytest.raises(KeyError):
        rebuild_embedded({"settings": {"kind": "lm-hidden-state", "lm": SMOLLM2_ID, "pooling": "mean"}})
    with pytest.raises(ValueError, match="pooling"):
        rebuild_embedded(
            {
                "settings": {
                    "kind": "lm-hidden-state",
                    "lm": SMOLLM2_ID,
                    "layer": 1,
                    "pooling": "max",
                    "max_length": 8,
                    "chat_template": False,
                }
            }
        )
