"""The ONNX embedder: the same vectors and decisions as the torch path, its export cache
(reused, checked, rebuilt when damaged) and the fall back to torch when an export does
not match."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.models import OnnxEmbedder, SentenceEmbedder, default_embedder, sentence_embedder
from adaptive_gates.models.embedded import embedded_minilm_dir
from adaptive_gates.models.embedding.onnx.export import MIN_COSINE, cache_problem, cached_export, check_export
from adaptive_gates.models.embedding.st_folder import UnsupportedFolder, read_pipeline
from support.immutable import immutable

EXPORT_LOG = "adaptive_gates.models.embedding.onnx.export"


@pytest.fixture(scope="module")
def questions(qa_records) -> list[str]:
    return [r.question for r in qa_records[:40]]


@pytest.fixture(scope="module")
def fresh_cache(tmp_path_factory) -> Path:
    """A cache root of this module's own, with the embedded MiniLM exported into it once."""
    root = tmp_path_factory.mktemp("cache")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ADAPTIVE_GATES_CACHE", str(root))
        cached_export(embedded_minilm_dir())
    return root


def test_default_is_onnx_and_torch_stays_available() -> None:
    assert isinstance(default_embedder(), OnnxEmbedder)
    assert isinstance(default_embedder("torch"), SentenceEmbedder)
    assert isinstance(sentence_embedder(backend="torch"), SentenceEmbedder)
    assert default_embedder("onnx") is default_embedder()
    with pytest.raises(ValueError, match="backend must be one of"):
        sentence_embedder(backend="tensorflow")  # type: ignore[arg-type]


def test_onnx_vectors_match_torch_on_real_questions(questions: list[str]) -> None:
    onnx_embedder = default_embedder("onnx")
    torch_vectors, onnx_vectors = default_embedder("torch").embed(questions), onnx_embedder.embed(questions)
    assert onnx_embedder.backend == "onnx"
    assert onnx_vectors.dtype == np.float32 and onnx_vectors.shape == (len(questions), 384)
    assert (torch_vectors * onnx_vectors).sum(axis=1).min() >= MIN_COSINE
    assert onnx_embedder.model_id == default_embedder("torch").model_id


def test_onnx_embedder_checks_input_as_the_torch_one() -> None:
    embedder = default_embedder("onnx")
    with pytest.raises(TypeError, match="not a single string"):
        embedder.embed("one question")
    with pytest.raises(TypeError, match="text 1 must be a str"):
        embedder.embed(["fine", 3])  # type: ignore[list-item]
    assert embedder.embed([]).shape == (0, 384)


def test_gate_fitted_on_torch_decides_the_same_through_onnx_after_save_and_load(
    outcome_records, questions: list[str], tmp_path: Path
) -> None:
    gate = SKRKnnGate(default_embedder("torch"), k=10).fit_outcomes(outcome_records)
    gate.save(tmp_path / "gate")
    loaded = SKRKnnGate.load(tmp_path / "gate")  # rebuilds the embedded MiniLM: the ONNX default
    assert loaded.embedder is None and isinstance(default_embedder(), OnnxEmbedder)
    before, after = gate.decide_batch(questions), loaded.decide_batch(questions)
    assert [d.retrieve for d in after] == [d.retrieve for d in before]
    assert np.allclose([d.score for d in after], [d.score for d in before], atol=1e-4)


def test_second_construction_loads_the_cached_export(
    fresh_cache: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(fresh_cache))
    (model_file,) = fresh_cache.glob("onnx-*/model.onnx")
    written = model_file.stat().st_mtime_ns
    with caplog.at_level(logging.INFO, logger=EXPORT_LOG):
        embedder = OnnxEmbedder()
        assert embedder.backend == "onnx"
    messages = [r.getMessage() for r in caplog.records if r.name == EXPORT_LOG]
    assert any(m.startswith("loading the ONNX export") for m in messages)
    assert not any(m.startswith("exported") for m in messages)
    assert model_file.stat().st_mtime_ns == written


def test_an_export_in_a_cache_no_one_can_write_is_loaded_without_its_lock(
    fresh_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The lock beside an export cannot be made in a read-only cache; an export there is
    still loaded (nothing can change it meanwhile), and nothing is written."""
    (exported,) = fresh_cache.glob("onnx-*")
    root = tmp_path / "cache"
    shutil.copytree(exported, root / exported.name)
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(root))
    with immutable(root), caplog.at_level(logging.INFO):
        embedder = OnnxEmbedder()
        assert embedder.backend == "onnx"
    messages = [r.getMessage() for r in caplog.records]
    assert any(m.startswith("loading the ONNX export") and "without a lock" in m for m in messages)
    assert not any("runs on torch" in m for m in messages)
    assert sorted(p.name for p in root.iterdir()) == [exported.name]


def test_an_empty_cache_no_one_can_write_runs_on_torch_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "cache"
    root.mkdir()
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(root))
    with immutable(root), caplog.at_level(logging.WARNING):
        assert OnnxEmbedder().backend == "torch"
    (warning,) = [r.getMessage() for r in caplog.records if "runs on torch" in r.getMessage()]
    assert "no export can be written: nothing is cached there" in warning
    assert list(root.iterdir()) == []


def test_a_changed_byte_in_the_cached_export_is_detected(fresh_cache: Path, tmp_path: Path) -> None:
    (exported,) = fresh_cache.glob("onnx-*")
    copy = shutil.copytree(exported, tmp_path / exported.name)
    assert cache_problem(copy) is None
    data = bytearray((copy / "model.onnx").read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one weight byte flipped
    (copy / "model.onnx").write_bytes(bytes(data))
    assert "does not match the SHA-256" in (cache_problem(copy) or "")


def test_a_truncated_cached_export_is_exported_again(
    fresh_cache: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    (exported,) = fresh_cache.glob("onnx-*")
    root = tmp_path / "cache"
    copy = shutil.copytree(exported, root / exported.name)
    size = (copy / "model.onnx").stat().st_size
    with (copy / "model.onnx").open("r+b") as fh:
        fh.truncate(size // 3)
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(root))
    with caplog.at_level(logging.INFO, logger=EXPORT_LOG):
        embedder = OnnxEmbedder()
        assert embedder.backend == "onnx"
    messages = [r.getMessage() for r in caplog.records if r.name == EXPORT_LOG]
    assert any("is unusable" in m and f"has {size // 3} bytes" in m for m in messages)
    assert any(m.startswith("exported") for m in messages)
    assert (copy / "model.onnx").stat().st_size == size and cache_problem(copy) is None


def test_a_tampered_export_fails_the_check(fresh_cache: Path, tmp_path: Path) -> None:
    (model_file,) = fresh_cache.glob("onnx-*/model.onnx")
    model = onnx.load(str(model_file))
    weight = next(w for w in model.graph.initializer if len(w.dims) == 2 and w.dims[0] == w.dims[1] == 384)
    values = onnx.numpy_helper.to_array(weight) * 1.5  # one attention projection scaled
    weight.CopyFrom(onnx.numpy_helper.from_array(values.astype(np.float32), weight.name))
    onnx.save(model, str(tmp_path / "tampered.onnx"))
    assert check_export(embedded_minilm_dir(), model_file) >= MIN_COSINE
    assert check_export(embedded_minilm_dir(), tmp_path / "tampered.onnx") < MIN_COSINE


def test_a_model_whose_export_does_not_match_runs_on_torch_with_a_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # A real folder whose sentence-transformers pipeline prepends a default prompt: the
    # ONNX path does not model prompts, so its export fails the check against torch.
    folder = shutil.copytree(embedded_minilm_dir(), tmp_path / "prompted")
    config = {"prompts": {"query": "query: "}, "default_prompt_name": "query"}
    (folder / "config_sentence_transformers.json").write_text(json.dumps(config), encoding="utf-8")
    monkeypatch.setenv("ADAPTIVE_GATES_CACHE", str(tmp_path / "cache"))
    embedder = OnnxEmbedder(str(folder))
    with caplog.at_level(logging.WARNING):
        assert embedder.backend == "torch"
    assert any("does not match sentence-transformers" in r.getMessage() for r in caplog.records)
    assert not list((tmp_path / "cache").glob("onnx-*"))  # nothing cached
    texts = ["who wrote hamlet", "the boiling point of water"]
    assert np.allclose(embedder.embed(texts), SentenceEmbedder(str(folder)).embed(texts), atol=1e-6)


def test_unsupported_pipelines_are_refused_by_name(tmp_path: Path) -> None:
    assert read_pipeline(embedded_minilm_dir()).pooling == "mean"
    folder = shutil.copytree(embedded_minilm_dir() / "1_Pooling", tmp_path / "model" / "1_Pooling")
    shutil.copy(embedded_minilm_dir() / "modules.json", tmp_path / "model")
    config = json.loads((folder / "config.json").read_text())
    config["pooling_mode_weightedmean_tokens"] = True
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(UnsupportedFolder, match=r"1_Pooling/config.json: supported is exactly one of"):
        read_pipeline(tmp_path / "model")


def test_two_processes_exporting_at_once_leave_one_whole_export(tmp_path: Path) -> None:
    script = (
        "from adaptive_gates.models import OnnxEmbedder\n"
        "embedder = OnnxEmbedder()\n"
        "print(embedder.backend, embedder.embed(['who wrote hamlet']).shape)\n"
    )
    env = {**os.environ, "ADAPTIVE_GATES_CACHE": str(tmp_path), "OMP_NUM_THREADS": "1"}
    runs = [subprocess.Popen([sys.executable, "-c", script], env=env, stdout=subprocess.PIPE, text=True) for _ in "ab"]
    outputs = [run.communicate(timeout=600)[0] for run in runs]
    assert [run.returncode for run in runs] == [0, 0]
    assert outputs == ["onnx (1, 384)\n"] * 2
    (exported,) = tmp_path.iterdir()  # one export, no temporary folder left behind
    assert exported.name.startswith("onnx-") and cache_problem(exported) is None
