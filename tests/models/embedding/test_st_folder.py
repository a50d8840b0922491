"""Reading a sentence-transformers folder's pipeline: the embedded MiniLM's, and real
folders in tmp_path that differ from it in one way each."""

from __future__ import annotations

import json
import shutil

import pytest

from adaptive_gates.models.embedded import embedded_minilm_dir
from adaptive_gates.models.embedding.st_folder import FolderPipeline, UnsupportedFolder, read_pipeline

TRANSFORMER = {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"}
POOLING = {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}
NORMALIZE = {"idx": 2, "name": "2", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}
DENSE = {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"}


@pytest.fixture
def folder(tmp_path):
    """A copy of the embedded MiniLM folder's pipeline files (the weights are not needed
    to read the pipeline)."""
    source = embedded_minilm_dir()
    for name in ("modules.json", "sentence_bert_config.json", "config.json"):
        shutil.copy(source / name, tmp_path / name)
    shutil.copytree(source / "1_Pooling", tmp_path / "1_Pooling")
    return tmp_path


def _write(path, obj):
    path.write_text(json.dumps(obj) if not isinstance(obj, str) else obj, encoding="utf-8")


def _pooling(folder, **changes):
    config = json.loads((folder / "1_Pooling" / "config.json").read_text())
    _write(folder / "1_Pooling" / "config.json", {**config, **changes})


def test_the_embedded_minilm_pipeline():
    assert read_pipeline(embedded_minilm_dir()) == FolderPipeline(
        pooling="mean", dimension=384, normalize=True, max_seq_length=256, do_lower_case=False
    )


def test_the_copy_reads_as_the_original(folder):
    assert read_pipeline(folder) == read_pipeline(embedded_minilm_dir())


def test_without_normalize_the_vectors_are_not_normalised(folder):
    _write(folder / "modules.json", [TRANSFORMER, POOLING])
    assert read_pipeline(folder).normalize is False


@pytest.mark.parametrize(
    ("modes", "pooling"),
    [
        ({"pooling_mode_mean_tokens": False, "pooling_mode_cls_token": True}, "cls"),
        ({"pooling_mode_mean_tokens": False, "pooling_mode_max_tokens": True}, "max"),
    ],
)
def test_other_poolings_are_read(folder, modes, pooling):
    _pooling(folder, **modes)
    assert read_pipeline(folder).pooling == pooling


def test_truncation_and_casing_come_from_sentence_bert_config(folder):
    _write(folder / "sentence_bert_config.json", {"max_seq_length": 128, "do_lower_case": True})
    pipeline = read_pipeline(folder)
    assert (pipeline.max_seq_length, pipeline.do_lower_case) == (128, True)
    (folder / "sentence_bert_config.json").unlink()
    pipeline = read_pipeline(folder)
    assert (pipeline.max_seq_length, pipeline.do_lower_case) == (None, False)


@pytest.mark.parametrize(
    ("modules", "problem"),
    [
        ([TRANSFORMER, POOLING, DENSE], "are not Transformer, Pooling"),
        ([TRANSFORMER, POOLING, DENSE, NORMALIZE], "are not Transformer, Pooling"),
        ([POOLING, TRANSFORMER], "are not Transformer, Pooling"),
        ([TRANSFORMER], "are not Transformer, Pooling"),
        ([{**TRANSFORMER, "path": "0_Transformer"}, POOLING], "not the folder itself"),
        ([], "non-empty list"),
        ({"modules": []}, "non-empty list"),
        ([TRANSFORMER, "1_Pooling"], "each module must be a JSON object"),
    ],
)
def test_unsupported_module_lists_are_refused(folder, modules, problem):
    _write(folder / "modules.json", modules)
    with pytest.raises(UnsupportedFolder, match=problem):
        read_pipeline(folder)


@pytest.mark.parametrize(
    "changes",
    [
        {"pooling_mode_mean_tokens": False},  # no mode
        {"pooling_mode_cls_token": True},  # two modes
        {"pooling_mode_mean_sqrt_len_tokens": True},
        {"pooling_mode_weightedmean_tokens": True},
        {"pooling_mode_mean_tokens": False, "pooling_mode_lasttoken": True},
    ],
)
def test_unsupported_poolings_are_refused(folder, changes):
    _pooling(folder, **changes)
    with pytest.raises(UnsupportedFolder, match="supported is exactly one of"):
        read_pipeline(folder)


def test_pooling_without_the_prompt_is_refused(folder):
    _pooling(folder, include_prompt=False)
    with pytest.raises(UnsupportedFolder, match="include_prompt"):
        read_pipeline(folder)


@pytest.mark.parametrize("dimension", [0, -384, True, "384", None, 384.0])
def test_a_bad_width_is_refused(folder, dimension):
    _pooling(folder, word_embedding_dimension=dimension)
    with pytest.raises(UnsupportedFolder, match="word_embedding_dimension"):
        read_pipeline(folder)


@pytest.mark.parametrize("max_seq_length", ["256", 256.0, True])
def test_a_bad_max_seq_length_is_refused(folder, max_seq_length):
    _write(folder / "sentence_bert_config.json", {"max_seq_length": max_seq_length})
    with pytest.raises(UnsupportedFolder, match="max_seq_length must be an int"):
        read_pipeline(folder)


@pytest.mark.parametrize("name", ["modules.json", "1_Pooling/config.json", "sentence_bert_config.json"])
def test_files_that_are_not_json_are_refused_naming_them(folder, name):
    _write(folder / name, "{not json")
    with pytest.raises(UnsupportedFolder, match="cannot read it as JSON"):
        read_pipeline(folder)


@pytest.mark.parametrize("name", ["1_Pooling/config.json", "sentence_bert_config.json"])
def test_configs_that_are_not_objects_are_refused(folder, name):
    _write(folder / name, [1, 2])
    with pytest.raises(UnsupportedFolder, match="expected a JSON object"):
        read_pipeline(folder)


def test_a_folder_without_modules_json_is_refused(tmp_path):
    with pytest.raises(UnsupportedFolder, match=r"modules\.json"):
        read_pipeline(tmp_path)
    assert issubclass(UnsupportedFolder, ValueError)
