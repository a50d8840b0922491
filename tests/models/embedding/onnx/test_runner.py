"""The sentence-transformers pipeline run by onnxruntime: threads, session, truncation,
batching and pooling, on the embedded MiniLM's cached export."""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import pytest
import transformers

from adaptive_gates.models.embedded import embedded_minilm_dir
from adaptive_gates.models.embedding.onnx.export import cached_export
from adaptive_gates.models.embedding.onnx.runner import (
    INPUT_NAMES,
    OnnxPipeline,
    intra_op_threads,
    max_length,
    open_session,
    pool,
)
from adaptive_gates.models.embedding.st_folder import FolderPipeline, read_pipeline

QUESTIONS = [
    "x",
    "What is the capital city of Australia?",
    "who wrote the declaration of independence",
    "In which year did the first person walk on the Moon, and which mission carried the crew there?",
]


@pytest.fixture(scope="module")
def folder():
    return embedded_minilm_dir()


@pytest.fixture(scope="module")
def tokenizer(folder):
    return transformers.AutoTokenizer.from_pretrained(folder)


@pytest.fixture(scope="module")
def pipeline(folder, tokenizer, embedder):
    _ = embedder.dimension  # the session's embedder exports the model first, if need be
    session = open_session(cached_export(folder), 1)
    return OnnxPipeline(session, tokenizer, read_pipeline(folder), 256)


def test_threads_follow_omp_num_threads(monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "3")
    assert intra_op_threads() == 3


@pytest.mark.parametrize("value", ["", "0", "two", "-1"])
def test_without_a_usable_omp_num_threads_torchs_count_is_used(monkeypatch, value):
    import torch

    monkeypatch.setenv("OMP_NUM_THREADS", value)
    assert "torch" in sys.modules
    assert intra_op_threads() == torch.get_num_threads()


def test_the_session_takes_the_tokenizers_inputs(pipeline, tokenizer):
    assert pipeline.input_names == [n for n in INPUT_NAMES if n in tokenizer.model_input_names]
    assert [o.name for o in pipeline.session.get_outputs()] == ["last_hidden_state"]


def test_open_session_refuses_a_file_that_is_no_model(tmp_path):
    bad = tmp_path / "model.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(Exception, match=r"(?i)protobuf|parse|load"):
        open_session(bad, 1)


def test_max_length_is_the_folders_else_the_models_limit(folder, tokenizer):
    pipeline = read_pipeline(folder)
    assert max_length(folder, pipeline, tokenizer) == 256
    unset = dataclasses.replace(pipeline, max_seq_length=None)
    assert max_length(folder, unset, tokenizer) == 512  # MiniLM's position embeddings


def test_vectors_are_the_embedders(pipeline, embedder):
    vectors = pipeline.embed(QUESTIONS, normalize=True, batch_size=16)
    assert vectors.shape == (4, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(vectors, embedder.embed(QUESTIONS), atol=1e-5)


def test_rows_keep_the_input_order_whatever_the_batches(pipeline):
    one_batch = pipeline.embed(QUESTIONS, normalize=True, batch_size=16)
    for batch_size in (1, 3):
        np.testing.assert_allclose(
            pipeline.embed(QUESTIONS, normalize=True, batch_size=batch_size), one_batch, atol=1e-5
        )
    reversed_rows = pipeline.embed(QUESTIONS[::-1], normalize=True, batch_size=2)
    np.testing.assert_allclose(reversed_rows[::-1], one_batch, atol=1e-5)


def test_the_batches_wrapper_sees_each_batch(pipeline):
    seen = []

    def batches(starts):
        for start in starts:
            seen.append(start)
            yield start

    pipeline.embed(QUESTIONS, normalize=True, batch_size=3, batches=batches)
    assert seen == [0, 3]


def test_texts_are_stripped_and_over_long_ones_truncated(pipeline):
    a, b = pipeline.embed(["  who wrote hamlet  ", "who wrote hamlet"], normalize=True, batch_size=2)
    np.testing.assert_allclose(a, b, atol=1e-6)
    long_text = " ".join(["the history of the printing press"] * 200)
    longer = long_text + " and then something else entirely about volcanoes"
    x, y = pipeline.embed([long_text, longer], normalize=True, batch_size=2)
    np.testing.assert_allclose(x, y, atol=1e-6)  # past 256 tokens nothing is read


def test_normalisation_follows_the_folder_or_the_caller(pipeline):
    raw = OnnxPipeline(
        pipeline.session, pipeline.tokenizer, dataclasses.replace(pipeline.pipeline, normalize=False), 256
    )
    unnormalised = raw.embed(QUESTIONS, normalize=False, batch_size=4)
    norms = np.linalg.norm(unnormalised, axis=1)
    assert np.all(np.abs(norms - 1) > 0.01)
    np.testing.assert_allclose(
        raw.embed(QUESTIONS, normalize=True, batch_size=4), unnormalised / norms[:, None], atol=1e-6
    )
    folder_says = pipeline.embed(QUESTIONS, normalize=False, batch_size=4)  # the folder has Normalize
    np.testing.assert_allclose(np.linalg.norm(folder_says, axis=1), 1.0, atol=1e-5)


STATES = np.array(
    [
        [[1.0, 0.0], [3.0, 4.0], [100.0, 100.0]],  # the last token is padding
        [[2.0, -2.0], [0.0, 6.0], [-4.0, 2.0]],
    ],
    dtype=np.float32,
)
MASK = np.array([[1, 1, 0], [1, 1, 1]])


@pytest.mark.parametrize(
    ("pooling", "expected"),
    [
        ("cls", [[1.0, 0.0], [2.0, -2.0]]),
        ("mean", [[2.0, 2.0], [-2 / 3, 2.0]]),
        ("max", [[3.0, 4.0], [2.0, 6.0]]),
    ],
)
def test_pooling_ignores_padding(pooling, expected):
    pipeline = FolderPipeline(pooling=pooling, dimension=2, normalize=False, max_seq_length=None, do_lower_case=False)
    pooled = pool(STATES, MASK, pipeline)
    assert pooled.dtype == np.float32
    np.testing.assert_allclose(pooled, expected, atol=1e-6)
