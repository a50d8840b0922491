"""SentenceEmbedder: the embedded all-MiniLM-L6-v2 run by sentence-transformers (torch)."""

from __future__ import annotations

import json
import threading

import numpy as np
import pytest

from adaptive_gates.errors import BackendError
from adaptive_gates.models.embedded import MINILM_ID, embedded_minilm_dir
from adaptive_gates.models.embedding.embedder import SentenceEmbedder

QUESTIONS = [
    "Who wrote the play Hamlet?",
    "What is the capital city of Australia?",
    "How tall is Mount Everest?",
]


@pytest.fixture(scope="module")
def torch_embedder(one_torch_thread):
    return SentenceEmbedder()


def test_identity_without_loading():
    fresh = SentenceEmbedder()
    assert fresh.model_id == MINILM_ID
    assert fresh.settings() == {"kind": "embedder", "embedder": MINILM_ID}
    assert SentenceEmbedder("/some/folder").model_id == "/some/folder"
    assert fresh._model is None  # nothing loaded by asking its identity


def test_vectors_are_normalised_float32_rows(torch_embedder):
    vectors = torch_embedder.embed(QUESTIONS)
    assert torch_embedder.dimension == 384
    assert vectors.shape == (3, 384) and vectors.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)


def test_similar_questions_are_closer_than_unrelated_ones(torch_embedder):
    a, b, c = torch_embedder.embed(["Who wrote Hamlet?", "Which author wrote the play Hamlet?", "How tall is Everest?"])
    assert a @ b > a @ c + 0.3


def test_the_same_vectors_as_the_onnx_embedder(torch_embedder, embedder):
    cosines = (torch_embedder.embed(QUESTIONS) * embedder.embed(QUESTIONS)).sum(axis=1)
    assert cosines.min() > 0.9999


def test_a_text_does_not_depend_on_its_batch(torch_embedder):
    alone = torch_embedder.embed([QUESTIONS[1]])
    batched = torch_embedder.embed(QUESTIONS)
    np.testing.assert_allclose(alone[0], batched[1], atol=1e-5)


@pytest.fixture(scope="module")
def unnormalised_folder(tmp_path_factory):
    """The embedded MiniLM's files (linked) with its Normalize module left out."""
    folder = tmp_path_factory.mktemp("minilm-raw")
    source = embedded_minilm_dir()
    for path in source.iterdir():
        (folder / path.name).symlink_to(path)
    (folder / "modules.json").unlink()
    modules = json.loads((source / "modules.json").read_text())
    (folder / "modules.json").write_text(json.dumps(modules[:2]))
    return folder


def test_normalize_decides_for_a_folder_that_does_not_normalise(unnormalised_folder, torch_embedder, one_torch_thread):
    raw = SentenceEmbedder(str(unnormalised_folder), normalize=False).embed(QUESTIONS)
    norms = np.linalg.norm(raw, axis=1)
    assert np.all(np.abs(norms - 1.0) > 0.01)
    unit = SentenceEmbedder(str(unnormalised_folder)).embed(QUESTIONS)
    np.testing.assert_allclose(unit, raw / norms[:, None], atol=1e-5)
    np.testing.assert_allclose(unit, torch_embedder.embed(QUESTIONS), atol=1e-5)


def test_nothing_to_embed_gives_no_rows(torch_embedder):
    out = torch_embedder.embed([])
    assert out.shape == (0, 384) and out.dtype == np.float32


def test_bad_input_is_refused(torch_embedder):
    with pytest.raises(TypeError, match="not a single string"):
        torch_embedder.embed("one question")
    with pytest.raises(TypeError, match="text 1"):
        torch_embedder.embed(["fine", 42])


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, "8", True])
def test_batch_size_must_be_a_positive_int(batch_size):
    with pytest.raises(ValueError, match="batch_size"):
        SentenceEmbedder(batch_size=batch_size)


def test_a_folder_that_is_no_model_fails_to_load_as_a_backend_error(tmp_path):
    (tmp_path / "modules.json").write_text(json.dumps([{"idx": 0, "name": "0", "path": "missing", "type": "x.Y"}]))
    broken = SentenceEmbedder(str(tmp_path))
    with pytest.raises(BackendError, match="could not load embedding model"):
        broken.embed(["a question"])


def test_threads_share_one_embedder(torch_embedder):
    expected = torch_embedder.embed(QUESTIONS)
    results = []
    threads = [threading.Thread(target=lambda: results.append(torch_embedder.embed(QUESTIONS))) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 3
    for out in results:
        np.testing.assert_allclose(out, expected, atol=1e-5)
