"""Save/load of fitted gates: identical decisions after a round trip, and every
kind of damage or mismatch refused with a message naming what is wrong."""

import json
import shutil

import numpy as np
import pytest

from adaptive_gates import GateLoadError, SKRClassifierGate, SKRKnnGate, load_gate

QUESTIONS = [
    "who wrote the play hamlet", "what is the capital city of france", "when did the second world war end",
    "how many legs does a spider have", "who painted the mona lisa", "what is the boiling point of water",
    "who discovered penicillin", "what year did the berlin wall fall",
]
LABELS = [0, 0, 1, 1, 0, 1, 1, 0]
PROBES = ["Which author wrote Hamlet?", "When did WW2 end?", "Who made the Mona Lisa?", "boiling water temperature",
          "berlin wall", "penicillin inventor", "spider legs"]


@pytest.fixture(scope="module")
def fitted(embedder):
    return {
        "knn": SKRKnnGate(embedder, k=3, weighting="similarity").fit(QUESTIONS, LABELS),
        "knn-majority-calibrated": SKRKnnGate(embedder, k=4, vote="majority").fit(QUESTIONS, LABELS).calibrate(
            PROBES, target_rate=0.5
        ),
        "cls": SKRClassifierGate(embedder, C=10.0).fit(QUESTIONS, LABELS),
    }


@pytest.mark.parametrize("key", ["knn", "knn-majority-calibrated", "cls"])
def test_round_trip_gives_identical_decisions(fitted, embedder, tmp_path, key):
    gate = fitted[key]
    gate.save(tmp_path / "g")
    loaded = type(gate).load(tmp_path / "g", embedder=embedder)
    assert loaded._json_params() == gate._json_params()
    assert loaded.threshold_ == gate.threshold_
    assert loaded.calibration_ == gate.calibration_
    before, after = gate.decide_batch(PROBES), loaded.decide_batch(PROBES)
    assert [d.retrieve for d in before] == [d.retrieve for d in after]
    np.testing.assert_array_equal([d.score for d in before], [d.score for d in after])
    assert [d.details for d in before] == [d.details for d in after]
    # The generic loader finds the type itself.
    assert type(load_gate(tmp_path / "g", embedder=embedder)) is type(gate)


def test_saved_directory_holds_json_and_arrays_only(fitted, tmp_path):
    fitted["cls"].save(tmp_path / "g")
    names = sorted(p.name for p in (tmp_path / "g").iterdir())
    assert names == ["coef.npy", "config.json", "labels.npy", "memory.faiss", "questions.json"]
    config = json.loads((tmp_path / "g" / "config.json").read_text())
    assert config["gate_type"] == "skr-cls" and config["state"]["encoder"]["dimension"] == 384
    assert "numpy" in config["library_versions"]
    for name in names:
        assert b"pickle" not in (tmp_path / "g" / name).read_bytes()[:200]


def test_added_memory_survives_save(fitted, embedder, tmp_path):
    gate = SKRKnnGate(embedder, k=1).fit(QUESTIONS, LABELS)
    gate.add(["who is the author of macbeth"], [1])
    gate.save(tmp_path / "g")
    loaded = SKRKnnGate.load(tmp_path / "g", embedder=embedder)
    assert len(loaded.memory_) == len(QUESTIONS) + 1
    assert loaded.decide("author of Macbeth").details["neighbours"][0]["question"] == "who is the author of macbeth"


def test_save_never_overwrites_silently(fitted, tmp_path):
    fitted["knn"].save(tmp_path / "g")
    with pytest.raises(FileExistsError):
        fitted["cls"].save(tmp_path / "g")
    fitted["cls"].save(tmp_path / "g", overwrite=True)
    assert json.loads((tmp_path / "g" / "config.json").read_text())["gate_type"] == "skr-cls"
    assert [p.name for p in tmp_path.iterdir()] == ["g"]  # no temp or backup left behind


def _saved(fitted, tmp_path, key="cls"):
    fitted[key].save(tmp_path / "g")
    return tmp_path / "g"


def _edit_config(path, edit):
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(config))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: (p / "labels.npy").unlink(), "missing file 'labels.npy'"),
        (lambda p: (p / "config.json").unlink(), "missing config.json"),
        (lambda p: (p / "config.json").write_text("{oops"), "not valid JSON"),
        (lambda p: (p / "coef.npy").write_bytes((p / "coef.npy").read_bytes()[:-8] + b"\0" * 8), "'coef.npy' does not match"),
        (lambda p: _edit_config(p, lambda c: c.update(format_version=99)), "format_version"),
        (lambda p: _edit_config(p, lambda c: c.update(gate_type="no-such-gate")), "gate_type"),
        (lambda p: _edit_config(p, lambda c: c["state"]["encoder"].update(dimension=768)), "dimension"),
        (lambda p: _edit_config(p, lambda c: c["state"]["encoder"].update(id="bert-base")), "encoder"),
        (lambda p: _edit_config(p, lambda c: c["params"].update(colour="blue")), "params"),
        (lambda p: _edit_config(p, lambda c: c.update(threshold=0.123)), "threshold"),
        (lambda p: _edit_config(p, lambda c: c["state"].update(size=3)), "disagree in size"),
        (lambda p: shutil.rmtree(p), "not a saved gate directory"),
    ],
)
def test_damaged_directory_is_refused(fitted, embedder, tmp_path, damage, message):
    path = _saved(fitted, tmp_path)
    damage(path)
    with pytest.raises(GateLoadError, match=message):
        SKRClassifierGate.load(path, embedder=embedder)


def test_wrong_gate_type_is_refused(fitted, embedder, tmp_path):
    path = _saved(fitted, tmp_path, "knn")
    with pytest.raises(GateLoadError, match="expected 'skr-cls'"):
        SKRClassifierGate.load(path, embedder=embedder)


class OtherEncoder:
    """Another encoder: same dimension, different model."""

    model_id = "some/other-encoder"
    dimension = 384

    def embed(self, texts):
        return np.ones((len(texts), 384), dtype=np.float32)


def test_mismatched_encoder_is_refused(fitted, tmp_path):
    path = _saved(fitted, tmp_path, "knn")
    with pytest.raises(GateLoadError, match="some/other-encoder"):
        SKRKnnGate.load(path, embedder=OtherEncoder())


def test_default_encoder_is_used_when_none_given(fitted, tmp_path):
    path = _saved(fitted, tmp_path, "knn")
    loaded = SKRKnnGate.load(path)  # saved with the embedded MiniLM: no embedder needed
    assert loaded.embedder.model_id == fitted["knn"].embedder.model_id
