"""The stacked gate's combiner as it is by default: logistic heads and boosted trees,
rank-averaged, over the question features and the question's MiniLM embedding reduced
by a PCA learned in fit. Real bundled outcomes of two AdaRAGUE tasks pooled (NQ and
TriviaQA, Llama-3.1-8B), the real MiniLM, real scikit-learn. Mechanics only: the
default threshold's rule, identical scores after a load, refusal of a saved gate
whose feature list or combiner does not match, feedback teaching one head, the
question-only gate cross-fitted without members, and a gate saved before the
combiner took embeddings still loading."""

import json
import shutil

import numpy as np
import pytest

from adaptive_gates import GateLoadError, StackedGate, load_gate, outcome_scores
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.evaluation import cross_fitted_scores
from adaptive_gates.gates import stacked
from adaptive_gates.gates.combiner.features import fit_feature_combiner
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.signals.question_features import FEATURE_NAMES, question_features
from support.saved_layouts import logistic_stacked_gate

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Per task: the first ``TRAIN`` records fit, the next ``HELD`` are scored.
TRAIN, HELD = 150, 40
LOGISTIC = {"model": "logistic", "embedding": False}


@pytest.fixture(scope="module")
def tasks():
    return [adarague_outcomes(task) for task in ("nq", "trivia")]


@pytest.fixture(scope="module")
def train(tasks):
    """300 records: 150 NQ, then 150 TriviaQA."""
    return [r for records in tasks for r in records[:TRAIN]]


@pytest.fixture(scope="module")
def held_out(tasks):
    return [r.question for records in tasks for r in records[TRAIN : TRAIN + HELD]]


@pytest.fixture(scope="module")
def encoder(cached_embedder):
    return cached_embedder


@pytest.fixture(scope="module")
def saved(encoder, train, tmp_path_factory):
    """A stacked gate with the default combiner (and one member), saved once: each test
    loads a copy of its own."""
    gate = StackedGate(encoder, members="popularity").fit_outcomes(train)
    return gate.save(tmp_path_factory.mktemp("stacked-embedding") / "gate")


@pytest.fixture
def fresh(saved, encoder):
    return load_gate(saved, embedder=encoder)


def _edit_config(path, edit):
    """Change config.json and sign it again, as only a forger (or an older version) would."""
    config = json.loads((path / CONFIG_FILE).read_text())
    edit(config)
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))


def test_the_default_gate_blends_trees_and_heads_over_the_embedding(fresh, encoder, train, held_out):
    combiner = fresh.combiner_
    assert (fresh.model, fresh.embedding, fresh.embedding_dims) == ("blend", True, 32)
    assert combiner.model == "blend" and set(combiner.boosted) == {"with", "without"}
    assert combiner.feature_names == ("member:popularity", *FEATURE_NAMES)
    assert combiner.projection is not None and combiner.projection.components.shape == (32, encoder.dimension)
    scores = fresh.score(held_out)
    assert np.all((scores >= 0) & (scores <= 1))
    decision = fresh.decide(held_out[0])
    assert decision.details["model"] == "blend" and set(decision.details["model_scores"]) == {"logistic", "boosted"}
    logistic = decision.details["model_scores"]["logistic"]
    assert logistic == pytest.approx(decision.details["p_with"] - decision.details["p_without"])


@pytest.mark.parametrize("model", ["blend", "boosted"])
@pytest.mark.parametrize("target", ["gain", "helps"])
def test_the_default_threshold_retrieves_as_often_as_the_reference_model_on_the_training_rows(
    encoder, train, model, target
):
    gate = StackedGate(encoder, members="", model=model, target=target).fit_outcomes(train)
    questions = [r.question for r in train]
    features = question_features(questions)  # no members: the question features are every named column
    vectors = np.asarray(encoder.embed(questions), dtype=np.float64)
    reference = gate.combiner_.model_scores(features, vectors)["logistic" if model == "blend" else "boosted"]
    a, b = outcome_scores(train)
    cut = 0.0 if target == "gain" else np.mean(b > a)  # a gain above 0; P(helps) above the base rate
    share = np.mean(reference > cut)
    retrieved = np.mean(gate.score(questions) > gate.threshold_)
    assert 0.05 < share < 0.95
    assert abs(retrieved - share) <= 2 / len(train)  # tied blended ranks move a cut by a row or so


def test_a_logistic_gate_keeps_its_rule(encoder, train):
    gain = StackedGate(encoder, members="", model="logistic").fit_outcomes(train)
    helps = StackedGate(encoder, members="", model="logistic", target="helps").fit_outcomes(train)
    a, b = outcome_scores(train)
    assert gain.threshold_ == 0.0 and helps.threshold_ == pytest.approx(np.mean(b > a))


def test_saved_and_loaded_it_scores_identically(fresh, encoder, held_out, tmp_path):
    fresh.calibrate(held_out, target_rate=0.3)
    path = fresh.save(tmp_path / "g")
    names = {p.name for p in path.iterdir()}
    assert {"projection_mean.npy", "projection_components.npy", "reference_logistic.npy"} <= names
    assert {"boosted_with_nodes.npy", "combiner_with.npy", "rows_features.npy"} <= names
    state = json.loads((path / CONFIG_FILE).read_text())["state"]
    assert state["encoder"] == {"id": encoder.model_id, "dimension": encoder.dimension}
    assert state["combiner"]["model"] == "blend" and 0 < state["default_threshold"] < 1
    loaded = load_gate(path, embedder=encoder)
    np.testing.assert_array_equal(loaded.score(held_out), fresh.score(held_out))
    assert loaded.threshold_ == fresh.threshold_ and loaded.reset_threshold().threshold_ == state["default_threshold"]
    # without an embedder it rebuilds the embedded MiniLM it was saved with
    np.testing.assert_allclose(load_gate(path).score(held_out[:5]), fresh.score(held_out[:5]), atol=1e-6)


def test_a_saved_gate_whose_features_or_combiner_do_not_match_is_refused(saved, tmp_path):
    path = shutil.copytree(saved, tmp_path / "names")
    _edit_config(path, lambda c: c["state"]["feature_names"].reverse())
    with pytest.raises(GateLoadError, match=r"field 'state\.feature_names'"):
        load_gate(path)

    # the gate's own parameters compute other features than its combiner was fitted on
    path = shutil.copytree(saved, tmp_path / "params")
    _edit_config(path, lambda c: c["params"].update(features=False))
    with pytest.raises(GateLoadError, match=r"field 'state\.feature_names'"):
        load_gate(path)

    path = shutil.copytree(saved, tmp_path / "combiner")
    _edit_config(path, lambda c: c["state"]["combiner"]["feature_names"].pop())
    with pytest.raises(GateLoadError, match="feature_names"):
        load_gate(path)

    for field, edit in (
        ("model", lambda c: c["params"].update(model="logistic")),
        ("projection", lambda c: c["params"].update(embedding=False)),
        ("projection", lambda c: c["params"].update(embedding_dims=8)),
    ):
        path = shutil.copytree(saved, tmp_path / f"edited-{field}-{len(list(tmp_path.iterdir()))}")
        _edit_config(path, edit)
        with pytest.raises(GateLoadError, match=rf"field 'state\.combiner\.{field}'"):
            load_gate(path)


def test_feedback_changes_the_scores_after_refit_and_teaches_one_head(fresh, held_out):
    before_scores, before = fresh.score(held_out), fresh.combiner_
    np.testing.assert_array_equal(fresh.refit().score(held_out), before_scores)  # no feedback: as fitted
    observed = held_out[:30]
    for question in observed:
        fresh.record_feedback(question, retrieved=True, correct=True)
    after = fresh.refit().combiner_
    # only the head of correctness with retrieval learns, in the logistic heads and the trees
    np.testing.assert_allclose(after.logistic.heads["without"][0], before.logistic.heads["without"][0], atol=1e-12)
    np.testing.assert_array_equal(after.boosted["without"].nodes, before.boosted["without"].nodes)
    assert not np.array_equal(after.boosted["with"].nodes, before.boosted["with"].nodes)
    assert not np.allclose(after.logistic.heads["with"][0], before.logistic.heads["with"][0])
    np.testing.assert_array_equal(after.projection.components, before.projection.components)
    scores = fresh.score(held_out)
    assert not np.array_equal(scores, before_scores)
    assert np.mean(scores[:30]) > np.mean(before_scores[:30])  # retrieval was right on every one of them
    assert 0 < fresh.threshold_ < 1


def test_the_question_only_gate_cross_fits_on_pooled_tasks_without_members(monkeypatch, encoder, train):
    def no_member(*args, **kwargs):
        raise AssertionError("a gate without members fitted one")

    monkeypatch.setattr(stacked, "member_scores", no_member)
    monkeypatch.setattr(stacked, "fit_member", no_member)
    fitted_on = []

    def spy(features, names, a, b, **kwargs):
        fitted_on.append((len(features), len(kwargs["embeddings"])))
        return fit_feature_combiner(features, names, a, b, **kwargs)

    monkeypatch.setattr(stacked, "fit_feature_combiner", spy)
    scores = cross_fitted_scores(lambda: StackedGate(encoder, members=""), train, folds=3, seed=0)
    assert scores.shape == (len(train),) and np.all((scores >= 0) & (scores <= 1))
    # each fold's PCA and models learned from that fold's training rows only
    assert fitted_on == [(200, 200)] * 3
    gate = StackedGate(encoder, members="").fit_outcomes(train)
    assert gate.members_ == {} and gate.feature_names_ == list(FEATURE_NAMES)


def test_the_embedding_alone_is_a_gate(encoder, train, held_out):
    gate = StackedGate(encoder, members="", features=False).fit_outcomes(train)
    assert gate.feature_names_ == [] and gate.combiner_.projection is not None
    assert np.all(np.isfinite(gate.score(held_out)))


@pytest.mark.parametrize("target", ["gain", "helps"])
def test_a_gate_saved_with_the_logistic_combiner_still_loads(encoder, train, held_out, tmp_path, target):
    gate = StackedGate(encoder, members="popularity", target=target, **LOGISTIC).fit_outcomes(train)
    old = logistic_stacked_gate(gate.save(tmp_path / "old"))
    config = json.loads((old / CONFIG_FILE).read_text())
    assert "model" not in config["params"] and "intercepts" in config["state"]["combiner"]
    loaded = load_gate(old, embedder=encoder)
    assert (loaded.model, loaded.embedding) == ("logistic", False)
    np.testing.assert_array_equal(loaded.score(held_out), gate.score(held_out))
    assert loaded.threshold_ == gate.threshold_ == (0.0 if target == "gain" else gate.combiner_.logistic.base_rate)
    loaded.record_feedback(held_out[0], retrieved=False, correct=False)
    assert not np.array_equal(loaded.refit().score(held_out), gate.score(held_out))
    # saved again, it is saved as a gate is now
    state = json.loads((loaded.save(tmp_path / "new") / CONFIG_FILE).read_text())["state"]
    assert state["combiner"]["model"] == "logistic" and "default_threshold" in state
