"""Save/load of fitted gates: identical decisions after a round trip, and every
kind of damage or mismatch refused with a message naming what is wrong."""

import hashlib
import json
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from adaptive_gates import BudgetedGate, GateLoadError, PopularityGate, SKRClassifierGate, SKRKnnGate, load_gate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.gates.base.saved import MAX_MEMBER_DEPTH
from adaptive_gates.persistence.saved_format import check_saved_backend, with_checksums
from support.saved_layouts import nest_budgets

QUESTIONS = [
    "who wrote the play hamlet",
    "what is the capital city of france",
    "when did the second world war end",
    "how many legs does a spider have",
    "who painted the mona lisa",
    "what is the boiling point of water",
    "who discovered penicillin",
    "what year did the berlin wall fall",
]
LABELS = [0, 0, 1, 1, 0, 1, 1, 0]
PROBES = [
    "Which author wrote Hamlet?",
    "When did WW2 end?",
    "Who made the Mona Lisa?",
    "boiling water temperature",
    "berlin wall",
    "penicillin inventor",
    "spider legs",
]


@pytest.fixture(scope="module")
def fitted(embedder):
    return {
        "knn": SKRKnnGate(embedder, k=3, weighting="similarity").fit(QUESTIONS, LABELS),
        "knn-majority-calibrated": SKRKnnGate(embedder, k=4, vote="majority")
        .fit(QUESTIONS, LABELS)
        .calibrate(PROBES, target_rate=0.5),
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
    assert sorted(config["files"]) == [n for n in names if n != "config.json"]
    assert sorted(config["checksums"]) == sorted(k for k in config if k != "checksums")


class PlantedPayload:
    """Unpickling this creates the marker file: evidence that a load unpickled."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (Path.touch, (self.marker,))


@pytest.mark.parametrize("victim", ["coef.npy", "labels.npy"])
def test_planted_pickle_is_refused_without_unpickling(fitted, embedder, tmp_path, victim):
    path = _saved(fitted, tmp_path)
    marker = tmp_path / "unpickled"
    # A real pickle: an object array, saved the way numpy pickles it.
    np.save(path / victim, np.array([PlantedPayload(marker)], dtype=object), allow_pickle=True)
    assert np.load(path / victim, allow_pickle=True) is not None and marker.exists()  # the payload works
    marker.unlink()
    # Make the directory consistent again, so only the pickle itself can stop the load.
    digest = hashlib.sha256((path / victim).read_bytes()).hexdigest()
    _edit_config(path, lambda c: c["files"].update({victim: digest}), resign=True)
    with pytest.raises(GateLoadError, match=f"'{victim}' holds object values"):
        SKRClassifierGate.load(path, embedder=embedder)
    assert not marker.exists()


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


def _own_directory(path):
    path.mkdir()
    (path / "notes.txt").write_text("my notes")
    return path


def _gate_with_a_stray_file(path, fitted):
    fitted["knn"].save(path)
    (path / "notes.txt").write_text("my notes")
    return path


def _gate_with_a_stray_folder(path, fitted):
    """A saved gate with a folder of the user's in it: no member folder it lists."""
    fitted["knn"].save(path)
    (path / "drafts").mkdir()
    (path / "drafts" / "config.json").write_text("{}")
    return path


def _foreign_config(path):
    path.mkdir()
    (path / "config.json").write_text(json.dumps({"model": "my own model", "files": {}}))
    return path


def _file(path):
    path.write_text("my data")
    return path


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda p, f: _own_directory(p), "is not a saved gate"),
        (lambda p, f: _foreign_config(p), "is not a saved gate"),
        (_gate_with_a_stray_file, r"not part of the saved gate \(notes.txt\)"),
        (_gate_with_a_stray_folder, r"not part of the saved gate \(drafts\)"),
        (lambda p, f: _file(p), "is not a directory"),
    ],
)
def test_overwrite_replaces_only_a_saved_gate(fitted, tmp_path, make, message):
    target = make(tmp_path / "target", fitted)
    before = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match=message):
        fitted["cls"].save(target, overwrite=True)
    after = {p.relative_to(tmp_path): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before  # nothing of the user's is lost, nothing is left behind


def test_overwrite_fills_an_empty_directory_and_keeps_neighbours(fitted, embedder, tmp_path):
    (tmp_path / "g").mkdir()
    (tmp_path / ".g.old").mkdir()  # a name the user chose next to the target
    (tmp_path / ".g.old" / "keep.txt").write_text("keep")
    with pytest.raises(FileExistsError):
        fitted["knn"].save(tmp_path / "g")
    fitted["knn"].save(tmp_path / "g", overwrite=True)
    fitted["cls"].save(tmp_path / "g", overwrite=True)
    assert type(load_gate(tmp_path / "g", embedder=embedder)) is SKRClassifierGate
    assert sorted(p.name for p in tmp_path.iterdir()) == [".g.old", "g"]
    assert (tmp_path / ".g.old" / "keep.txt").read_text() == "keep"


def _saved(fitted, tmp_path, key="cls"):
    fitted[key].save(tmp_path / "g")
    return tmp_path / "g"


def _edit_config(path, edit, resign=False):
    """Edit a saved config.json; ``resign`` recomputes its checksums, as a consistent
    but wrong config would have them, so the checks behind the checksums are reached."""
    config = json.loads((path / "config.json").read_text())
    edit(config)
    (path / "config.json").write_text(json.dumps(with_checksums(config) if resign else config))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda p: (p / "labels.npy").unlink(), "missing file 'labels.npy'"),
        (lambda p: (p / "config.json").unlink(), "missing config.json"),
        (lambda p: (p / "config.json").write_text("{oops"), "not valid JSON"),
        (
            lambda p: (p / "coef.npy").write_bytes((p / "coef.npy").read_bytes()[:-8] + b"\0" * 8),
            "'coef.npy' does not match",
        ),
        (lambda p: _edit_config(p, lambda c: c.update(format_version=99)), "format_version"),
        (lambda p: _edit_config(p, lambda c: c.pop("checksums")), "field 'checksums' is missing"),
        # Consistent but wrong configs: the checks behind the checksums.
        (lambda p: _edit_config(p, lambda c: c.update(gate_type="no-such-gate"), resign=True), "gate_type"),
        (lambda p: _edit_config(p, lambda c: c["state"]["encoder"].update(dimension=768), resign=True), "dimension"),
        (lambda p: _edit_config(p, lambda c: c["state"]["encoder"].update(id="bert-base"), resign=True), "encoder"),
        (lambda p: _edit_config(p, lambda c: c["params"].update(colour="blue"), resign=True), "params"),
        (lambda p: _edit_config(p, lambda c: c.update(threshold=0.123), resign=True), "threshold"),
        (lambda p: _edit_config(p, lambda c: c["state"].update(size=3), resign=True), "disagree in size"),
        (lambda p: shutil.rmtree(p), "not a saved gate directory"),
    ],
)
def test_damaged_directory_is_refused(fitted, embedder, tmp_path, damage, message):
    path = _saved(fitted, tmp_path)
    damage(path)
    with pytest.raises(GateLoadError, match=message):
        SKRClassifierGate.load(path, embedder=embedder)


@pytest.mark.parametrize(
    "key, edit, field",
    [
        ("knn", lambda c: c["params"].update(k=1), "params"),
        ("knn", lambda c: c["params"].update(weighting="uniform"), "params"),
        ("knn", lambda c: c["params"].update(fallback_retrieve=False), "params"),
        ("cls", lambda c: c["params"].update(C=0.01), "params"),
        ("knn-majority-calibrated", lambda c: c["calibration"].update(threshold=0.9), "calibration"),
        ("knn-majority-calibrated", lambda c: c.update(calibration=None), "calibration"),
        ("cls", lambda c: c["state"].update(intercept=5.0), "state"),
        ("cls", lambda c: c["files"].update({"coef.npy": "0" * 64}), "files"),
        ("cls", lambda c: c.update(note="hand-edited"), "note"),
    ],
)
def test_edited_config_is_refused_naming_the_field(fitted, embedder, tmp_path, key, edit, field):
    path = _saved(fitted, tmp_path, key)
    _edit_config(path, edit)
    with pytest.raises(GateLoadError, match=f"modified after saving .*field '{field}'"):
        load_gate(path, embedder=embedder)


def test_reformatted_config_still_loads(fitted, embedder, tmp_path):
    # Only values count: re-indenting or reordering config.json is no edit.
    path = _saved(fitted, tmp_path, "knn")
    config = json.loads((path / "config.json").read_text())
    (path / "config.json").write_text(json.dumps(dict(reversed(config.items())), sort_keys=True, indent=7))
    assert load_gate(path, embedder=embedder).k == fitted["knn"].k


def test_gate_saved_in_format_1_is_refused_with_what_to_do(fitted, embedder, tmp_path):
    # What an earlier version wrote: the same layout, no checksums of the config.
    path = _saved(fitted, tmp_path, "knn")
    _edit_config(path, lambda c: (c.pop("checksums"), c.update(format_version=1)))
    with pytest.raises(GateLoadError, match=r"'format_version' is 1.*no checksums.*fit and save the gate again"):
        load_gate(path, embedder=embedder)


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
    assert loaded.embedder is None  # the parameter stays as given: the default encoder
    assert [d.details for d in loaded.decide_batch(PROBES)] == [d.details for d in fitted["knn"].decide_batch(PROBES)]


def test_saved_backend_check_names_the_field_or_the_argument(tmp_path):
    check_saved_backend(tmp_path, "state.encoder.id", "mini", "mini", "embedder")  # the same: no error
    with pytest.raises(GateLoadError, match=r"field 'state.encoder.id' is 'mini' but the given embedder is 'big'"):
        check_saved_backend(tmp_path, "state.encoder.id", "mini", "big", "embedder")
    with pytest.raises(GateLoadError, match=r"saved with encoder 'mini'; pass embedder= with that model"):
        check_saved_backend(tmp_path, "state.encoder.id", "mini", "default", "encoder", pass_argument="embedder")
    with pytest.raises(GateLoadError, match=r"is 384 but the given embedder's dimension is 768; vectors differ"):
        check_saved_backend(tmp_path, "state.encoder.dimension", 384, 768, "embedder's dimension", why="vectors differ")


@pytest.fixture(scope="module")
def saved_budget(tmp_path_factory) -> Path:
    """A budget around a popularity gate (no model: quick to nest deep), saved."""
    outcomes = adarague_outcomes("nq")[:60]
    popularity = PopularityGate().fit([r.question for r in outcomes]).fit_outcomes(outcomes)
    return BudgetedGate(popularity, target_rate=0.3).save(tmp_path_factory.mktemp("budget") / "gate")


def test_members_nested_up_to_the_limit_load(saved_budget, tmp_path) -> None:
    # the gate loaded and MAX_MEMBER_DEPTH budgets below it, then the popularity gate: one too many
    path = nest_budgets(saved_budget, tmp_path / "nested", MAX_MEMBER_DEPTH)
    loaded = load_gate(path)
    for _ in range(MAX_MEMBER_DEPTH - 1):
        loaded = loaded.gate
    assert isinstance(loaded, BudgetedGate) and isinstance(loaded.gate, PopularityGate)


@pytest.mark.parametrize("depth", [MAX_MEMBER_DEPTH + 1, 201])
def test_members_nested_deeper_than_the_limit_are_refused_naming_the_depth(saved_budget, tmp_path, depth) -> None:
    path = nest_budgets(saved_budget, tmp_path / "nested", depth)
    deepest = path.joinpath(*["gate"] * MAX_MEMBER_DEPTH)
    nested = f"the wrapped gate is nested {MAX_MEMBER_DEPTH + 1} levels deep in member gates"
    message = f"^{re.escape(str(deepest))}: {nested}, more than the {MAX_MEMBER_DEPTH} levels a saved gate may hold$"
    with pytest.raises(GateLoadError, match=message):
        load_gate(path)
