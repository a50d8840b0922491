"""The protocols a gate needs from its backends, and their checks."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

from adaptive_gates.errors import BackendError
from adaptive_gates.models.lm.local import LocalCausalLM
from adaptive_gates.models.protocols import Embedder, ProbingLM, check_probing_lm, check_vectors


class LengthEmbedder:
    """An embedder of its own: a text's length and its number of words."""

    model_id = "length"
    dimension = 2

    def embed(self, texts):
        return np.array([[len(t), len(t.split())] for t in texts], dtype=np.float32).reshape(-1, 2)


class NoEmbed:
    model_id = "nothing"
    dimension = 2


class LazyProbingLM:
    """Every ProbingLM member, its properties failing when read (as a model that would
    load on first access)."""

    @property
    def model_id(self):
        raise AssertionError("model_id was read")

    @property
    def tokenizer(self):
        raise AssertionError("tokenizer was read")

    @property
    def num_layers(self):
        raise AssertionError("num_layers was read")

    def generate(self, prompts, **kwargs):
        return []

    def sample_with_states(self, prompt, k=20, **kwargs):
        return []

    def prefix_cache(self, size=4):
        return contextlib.nullcontext()


def test_the_embedded_embedder_and_one_of_ones_own_are_embedders(embedder):
    assert isinstance(embedder, Embedder)
    assert isinstance(LengthEmbedder(), Embedder)
    assert not isinstance(NoEmbed(), Embedder)
    assert not isinstance("text", Embedder)


def test_local_causal_lm_is_a_probing_lm(lm):
    assert isinstance(lm, ProbingLM)
    check_probing_lm(lm, "SeaKR")
    check_probing_lm(LocalCausalLM(), "SeaKR")  # an unloaded one, checked without loading it


def test_check_probing_lm_reads_no_property():
    check_probing_lm(LazyProbingLM(), "SeaKR")


def test_check_probing_lm_names_what_is_missing(embedder):
    with pytest.raises(TypeError, match=r"SeaKR needs a probing LM .* lacks generate, num_layers, prefix_cache"):
        check_probing_lm(embedder, "SeaKR")

    class HalfLM(LazyProbingLM):
        sample_with_states = None  # type: ignore[assignment]

    check_probing_lm(HalfLM(), "SeaKR")  # present, even if unusable: only presence is checked
    with pytest.raises(TypeError, match="object lacks generate, model_id, num_layers"):
        check_probing_lm(object(), "the gate")


def test_check_vectors_gives_finite_float32_rows():
    vectors = check_vectors([[1, 2], [3, 4]], 2, "m")
    assert vectors.dtype == np.float32
    assert vectors.tolist() == [[1.0, 2.0], [3.0, 4.0]]
    assert check_vectors(LengthEmbedder().embed(["a b", "c"]), 2, "length").shape == (2, 2)


@pytest.mark.parametrize("vectors", [np.zeros((3, 2)), np.zeros(2), np.zeros((2, 2, 1)), []])
def test_check_vectors_refuses_another_shape(vectors):
    with pytest.raises(BackendError, match=r"embedder 'm' returned shape"):
        check_vectors(vectors, 2, "m")


def test_check_vectors_refuses_nan_and_inf():
    with pytest.raises(BackendError, match="NaN or inf"):
        check_vectors([[0.0, np.nan]], 1, "m")
    with pytest.raises(BackendError, match="NaN or inf"):
        check_vectors([[np.inf, 0.0]], 1, "m")


def test_check_vectors_refuses_what_is_not_numbers():
    with pytest.raises(ValueError):
        check_vectors([["a", "b"]], 1, "m")
