"""The stacked gate on real outcome records with the real MiniLM: the combiner learns
only from out-of-fold member scores and never scores its own rows inside CV; its two
targets; feedback and refitting; persistence as one directory with a sub-folder per
member (inside a budget too, and flat as saved before), refusal of tampered parts; the
command line."""

import json
import logging
import shutil
from functools import partial

import numpy as np
import pytest

from adaptive_gates import (
    BudgetedGate,
    GateLoadError,
    NotFittedError,
    StackedGate,
    load_gate,
    outcome_scores,
)
from adaptive_gates.cli import main
from adaptive_gates.evaluation import cross_fitted_scores
from adaptive_gates.gates import stacked
from adaptive_gates.gates.base.feedback import FEEDBACK_FILE
from adaptive_gates.gates.combiner.features import fit_feature_combiner
from adaptive_gates.gates.combiner.logistic import fit_combiner, head_outcomes
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.records.selfknowledge import UNKNOWN
from adaptive_gates.signals.question_features import FEATURE_NAMES
from support.saved_layouts import flatten_members

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = "skr-knn,popularity"
#: The combiner these tests were written for: the logistic heads alone over the members'
#: scores and the question features, without the question's embedding (the gate's
#: defaults, blended with trees over the embedding too, are tested in test_stacked_embedding.py).
LOGISTIC = {"model": "logistic", "embedding": False}


@pytest.fixture(scope="module")
def encoder(cached_embedder):
    """MiniLM behind a memo: cross-fitting embeds each question many times."""
    return cached_embedder


def _cut(records) -> int:
    """Where training rows end: 60% of the outcome records (300 of the shared NQ's 500;
    96 of the 160 collected without the shared data)."""
    return int(len(records) * 0.6)


@pytest.fixture(scope="module")
def train(outcome_records):
    return outcome_records[: _cut(outcome_records)]


@pytest.fixture(scope="module")
def test_questions(outcome_records):
    cut = _cut(outcome_records)
    return [r.question for r in outcome_records[cut : cut + 60]]


@pytest.fixture(scope="module")
def held_out(outcome_records):
    return [r.question for r in outcome_records[_cut(outcome_records) :]]


@pytest.fixture(scope="module")
def fitted(encoder, train):
    return StackedGate(encoder, members="skr-knn,skr-cls,popularity", **LOGISTIC).fit_outcomes(train)


@pytest.fixture(scope="module")
def saved(encoder, train, tmp_path_factory):
    """A gate fitted like ``fitted``, saved once so each test can load a copy of its own."""
    gate = StackedGate(encoder, members="skr-knn,skr-cls,popularity", **LOGISTIC).fit_outcomes(train)
    return gate.save(tmp_path_factory.mktemp("stacked") / "gate")


@pytest.fixture
def fresh(saved, encoder):
    """A fitted stacked gate no other test has given feedback to."""
    return load_gate(saved, embedder=encoder)


def _spy_on_members(monkeypatch):
    """Record, for every member gate built, the questions it was fitted on and those it
    scored for others (not while fitting itself)."""
    log = []
    for name, spec in list(stacked.MEMBERS.items()):

        def build(encoder, _build=spec.build):
            gate = _build(encoder)
            entry = {"gate": gate.name, "fitted": set(), "scored": set(), "fitting": False}
            log.append(entry)
            fit, score = gate.fit_outcomes, gate.score

            def spy_fit(records, metric="contains"):
                entry["fitted"].update(r.question for r in records)
                entry["fitting"] = True  # a member may score its own rows to set its own threshold
                try:
                    return fit(records, metric)
                finally:
                    entry["fitting"] = False

            def spy_score(questions):
                if not entry["fitting"]:  # scores that leave the member
                    entry["scored"].update(questions)
                return score(questions)

            gate.fit_outcomes, gate.score = spy_fit, spy_score
            return gate

        monkeypatch.setitem(stacked.MEMBERS, name, stacked.MemberSpec(build, spec.backend))
    return log


def test_the_combiner_learns_from_out_of_fold_member_scores_only(monkeypatch, encoder, train):
    seen = {}

    def capture(features, *args, **kwargs):
        seen["features"] = features
        return fit_feature_combiner(features, *args, **kwargs)

    monkeypatch.setattr(stacked, "fit_feature_combiner", capture)
    gate = StackedGate(encoder, members=SMALL, folds=5, seed=3).fit_outcomes(train)
    questions = [r.question for r in train]
    assert gate.feature_names_ == ["member:skr-knn", "member:popularity", *FEATURE_NAMES]
    for column, name in enumerate(["skr-knn", "popularity"]):
        expected = cross_fitted_scores(partial(stacked.MEMBERS[name].build, encoder), train, "contains", 5, 3)
        np.testing.assert_array_equal(seen["features"][:, column], expected)
    # In-sample, a kNN member finds each question itself among its neighbours: had the
    # combiner been fed those scores, the column above would be these.
    in_sample = gate.members_["skr-knn"].score(questions)
    assert not np.allclose(seen["features"][:, 0], in_sample)
    assert np.mean(np.abs(seen["features"][:, 0] - in_sample)) > 0.05


def test_no_member_scores_a_row_it_was_fitted_on_while_the_gate_fits(monkeypatch, encoder, train, test_questions):
    log = _spy_on_members(monkeypatch)
    gate = StackedGate(encoder, members=SMALL, folds=4).fit_outcomes(train)
    assert len(log) == 2 * (4 + 1)  # per member: one per fold, then the one fitted on all rows
    fold_members = [e for e in log if e["scored"]]
    assert len(fold_members) == 2 * 4
    for entry in fold_members:
        assert entry["fitted"] and not entry["fitted"] & entry["scored"], entry["gate"]
    served = [e for e in log if not e["scored"]]
    assert all(e["fitted"] == {r.question for r in train} for e in served)
    gate.score(test_questions)
    assert all(e["scored"] == set(test_questions) for e in served)


def test_cross_validated_stacked_gates_never_score_their_own_rows(encoder, train):
    log = []

    class Recorded(StackedGate):
        def fit_outcomes(self, records, metric="contains"):
            self.rows = {r.question for r in records}
            return super().fit_outcomes(records, metric)

        def score(self, questions):
            log.append((self.rows, set(questions)))
            return super().score(questions)

    scores = cross_fitted_scores(lambda: Recorded(encoder, members=SMALL), train, folds=3, seed=0)
    assert len(log) == 3 and np.all(np.isfinite(scores))
    assert all(rows and not rows & scored for rows, scored in log)
    assert set().union(*(scored for _, scored in log)) == {r.question for r in train}


def test_gain_and_helps_targets(encoder, train, fitted, test_questions):
    scores = fitted.score(test_questions)
    assert np.all((scores >= -1) & (scores <= 1)) and fitted.threshold_ == 0.0
    decision = fitted.decide(test_questions[0])
    assert decision.score == pytest.approx(decision.details["p_with"] - decision.details["p_without"])
    assert set(decision.details["members"]) == {"skr-knn", "skr-cls", "popularity"}

    helps = StackedGate(encoder, members=SMALL, target="helps", **LOGISTIC).fit_outcomes(train)
    a, b = outcome_scores(train)
    assert helps.threshold_ == pytest.approx(np.mean(b > a))  # retrieve when above the base rate
    p = helps.score(test_questions)
    assert np.all((p >= 0) & (p <= 1))


def test_heads_are_calibrated_on_their_training_rows(train):
    features = np.random.default_rng(0).normal(size=(len(train), 4))
    a, b = outcome_scores(train)
    combiner = fit_combiner(features, head_outcomes(a, b, "gain"), "gain", C=0.05)
    p = combiner.head_probabilities(features)
    # a logistic regression's unpenalised intercept makes its mean prediction the base rate
    assert p["with"].mean() == pytest.approx(b.mean(), abs=1e-3)
    assert p["without"].mean() == pytest.approx(a.mean(), abs=1e-3)
    with pytest.raises(ValueError, match="nothing to learn"):
        fit_combiner(features, head_outcomes(np.zeros_like(a), b, "gain"), "gain", C=1.0)


def test_round_trip_with_a_folder_per_member(fresh, encoder, test_questions, tmp_path):
    fitted = fresh  # a copy of its own: calibrating it leaves the module's gate as fitted
    fitted.calibrate(test_questions, target_rate=0.4)
    path = fitted.save(tmp_path / "g")
    # one directory: each member a saved gate in its sub-folder, beside the combiner's arrays
    folders = ["member-0-skr-knn", "member-1-skr-cls", "member-2-popularity"]
    assert sorted(p.name for p in path.iterdir() if p.is_dir()) == folders
    names = {p.relative_to(path).as_posix() for p in path.rglob("*")}
    assert {
        "member-0-skr-knn/labels.npy",
        "member-1-skr-cls/coef.npy",
        "combiner_with.npy",
        "rows_features.npy",
        "rows_questions.json",
    } <= names
    assert FEEDBACK_FILE not in names  # no feedback, no log
    state = json.loads((path / CONFIG_FILE).read_text())["state"]
    assert state["members"] == [{"folder": folder} for folder in folders]
    member_types = [json.loads((path / f / CONFIG_FILE).read_text())["gate_type"] for f in folders]
    assert member_types == ["skr-knn", "skr-cls", "popularity"]
    assert not list(path.rglob("*.pkl"))
    loaded = load_gate(path, embedder=encoder)
    assert isinstance(loaded, StackedGate) and loaded.members == fitted.members
    np.testing.assert_allclose(loaded.score(test_questions), fitted.score(test_questions), rtol=0, atol=1e-12)
    assert loaded.threshold_ == fitted.threshold_
    # without an embedder the members rebuild the embedded MiniLM they were saved with
    np.testing.assert_allclose(load_gate(path).score(test_questions[:5]), fitted.score(test_questions[:5]), atol=1e-6)
    # a saved stacked gate can be replaced by another
    fitted.save(path, overwrite=True)
    assert {p.relative_to(path).as_posix() for p in path.rglob("*")} == names


def test_a_budget_around_a_stacked_gate_saves_and_loads(fresh, encoder, test_questions, tmp_path):
    budget = BudgetedGate(fresh, target_rate=0.3, window=50).calibrate(test_questions[:40])
    budget.decide_batch(test_questions[40:50])
    path = budget.save(tmp_path / "budget")
    assert (path / "gate" / "member-1-skr-cls" / "coef.npy").is_file()
    loaded = load_gate(path, embedder=encoder)
    assert isinstance(loaded.gate, StackedGate)
    np.testing.assert_allclose(loaded.gate.score(test_questions), fresh.score(test_questions), rtol=0, atol=1e-12)
    later = test_questions[50:]
    assert [d.retrieve for d in loaded.decide_batch(later)] == [d.retrieve for d in budget.decide_batch(later)]


def _edit_state(path, edit):
    """Change the saved state and sign config.json again, as only a forger would."""
    config = json.loads((path / CONFIG_FILE).read_text())
    edit(config["state"])
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))


def test_a_stacked_gate_saved_flat_still_loads(saved, encoder, test_questions, tmp_path):
    flat = flatten_members(shutil.copytree(saved, tmp_path / "flat"))
    assert not [p for p in flat.iterdir() if p.is_dir()]
    assert {"member-0-skr-knn.labels.npy", "member-1-skr-cls.coef.npy"} <= {p.name for p in flat.iterdir()}
    state = json.loads((flat / CONFIG_FILE).read_text())["state"]
    assert [m["config"]["gate_type"] for m in state["members"]] == ["skr-knn", "skr-cls", "popularity"]
    loaded = load_gate(flat, embedder=encoder)
    np.testing.assert_array_equal(
        loaded.score(test_questions), load_gate(saved, embedder=encoder).score(test_questions)
    )


def test_tampered_parts_are_refused(fitted, encoder, train, tmp_path):
    path = fitted.save(tmp_path / "g")
    coef = path / "member-1-skr-cls" / "coef.npy"
    np.save(coef, np.load(coef) * 2)
    with pytest.raises(GateLoadError, match=r"member-1-skr-cls: file 'coef\.npy' does not match its checksum"):
        load_gate(path, embedder=encoder)

    for name in ("combiner_with.npy", "rows_features.npy"):
        path = fitted.save(tmp_path / name)
        array = np.load(path / name)
        np.save(path / name, array + 1)
        with pytest.raises(GateLoadError, match=f"'{name}' does not match its checksum"):
            load_gate(path, embedder=encoder)

    # a member's file swapped for that of another valid stacked gate
    path = fitted.save(tmp_path / "i")
    other = (
        StackedGate(encoder, members="skr-knn,skr-cls,popularity", **LOGISTIC)
        .fit_outcomes(train[: len(train) // 2])
        .save(tmp_path / "o")
    )
    labels = "member-0-skr-knn/labels.npy"
    (path / labels).write_bytes((other / labels).read_bytes())
    with pytest.raises(GateLoadError, match=r"member-0-skr-knn: file 'labels\.npy' does not match its checksum"):
        load_gate(path, embedder=encoder)

    # a member's whole folder swapped for that of the other gate: its config.json differs
    shutil.rmtree(path / "member-0-skr-knn")
    shutil.copytree(other / "member-0-skr-knn", path / "member-0-skr-knn")
    with pytest.raises(GateLoadError, match=r"file 'member-0-skr-knn/config\.json' does not match its checksum"):
        load_gate(path, embedder=encoder)

    # a member's saved parameters edited, its config.json signed again
    path = fitted.save(tmp_path / "j")
    member = path / "member-0-skr-knn" / CONFIG_FILE
    config = json.loads(member.read_text())
    config["params"]["k"] = 3
    member.write_text(json.dumps(with_checksums(config)))
    with pytest.raises(GateLoadError, match=r"file 'member-0-skr-knn/config\.json' does not match its checksum"):
        load_gate(path, embedder=encoder)

    path = fitted.save(tmp_path / "k")
    (path / labels).unlink()
    with pytest.raises(GateLoadError, match=r"member-0-skr-knn: missing file 'labels\.npy'"):
        load_gate(path, embedder=encoder)

    # members in another order, signed again: each member must be the gate its place names
    path = fitted.save(tmp_path / "l")
    _edit_state(path, lambda state: state["members"].reverse())
    with pytest.raises(GateLoadError, match="member 0 is a 'popularity' gate, expected 'skr-knn'"):
        load_gate(path, embedder=encoder)


# Training questions the fitted gate is surest to answer without retrieval, each with
# another wording of it (checked in the test).
PARAPHRASES = {
    "what year did russia sell alaska to the united states": (
        "in which year did the united states buy alaska from russia"
    ),
    "who was president when the civil war started": "which us president was in office when the civil war began",
    "what year did the first ipod touch come out": "when was the first ipod touch released",
    "how many seasons of gossip girl are there": "how many seasons does gossip girl have",
    "who plays kitty softpaws in puss in boots": "who is the voice of kitty softpaws in puss in boots",
}


def test_feedback_changes_later_decisions_on_similar_questions_after_refit(fresh, train, held_out):
    questions = [r.question for r in train]
    before = fresh.score(questions)
    cluster = [questions[i] for i in np.argsort(before)[:30]]
    # hand-written rewordings of NQ training questions in the cluster
    assert set(PARAPHRASES) <= set(cluster)
    paraphrases = list(PARAPHRASES.values())
    assert not any(d.retrieve for d in fresh.decide_batch(paraphrases))
    far = [held_out[i] for i in np.argsort(fresh.score(held_out))[-30:]]  # surest to need retrieval
    before_cluster, before_paraphrases, before_far = fresh.score(cluster), fresh.score(paraphrases), fresh.score(far)

    # Contradicting the training rows: answered directly, these were wrong; with retrieval, right.
    for question in cluster:
        assert fresh.record_feedback(question, retrieved=False, correct=False).label == UNKNOWN
        assert fresh.record_feedback(question, retrieved=True, correct=True).label is None
    assert len(fresh.feedback_) == 60
    np.testing.assert_array_equal(fresh.score(paraphrases), before_paraphrases)  # logged, not learned yet

    fresh.refit()
    after_cluster = fresh.score(cluster)
    assert np.mean(after_cluster - before_cluster) > 0.2 and np.mean(after_cluster > 0) >= 0.8
    moved = np.mean(after_cluster - before_cluster)
    decisions = fresh.decide_batch(paraphrases)  # wordings it never saw
    assert all(d.retrieve for d in decisions)
    assert all(d.score > s for d, s in zip(decisions, before_paraphrases))
    moved = np.mean([d.score for d in decisions] - before_paraphrases)
    assert np.mean(np.abs(fresh.score(far) - before_far)) < moved / 4  # questions unlike them barely move


@pytest.mark.parametrize("retrieved, learns, keeps", [(True, "with", "without"), (False, "without", "with")])
def test_an_observation_teaches_only_the_head_of_the_answer_it_shows(fresh, train, retrieved, learns, keeps):
    questions = [r.question for r in train[:40]]
    before = fresh.combiner_.logistic
    p_before = fresh.decide_batch(questions)
    for question in questions:
        fresh.record_feedback(question, retrieved=retrieved, correct=True)
    after = fresh.refit().combiner_.logistic
    np.testing.assert_allclose(after.heads[keeps][0], before.heads[keeps][0], rtol=0, atol=1e-12)
    assert after.heads[keeps][1] == pytest.approx(before.heads[keeps][1], abs=1e-12)
    assert not np.allclose(after.heads[learns][0], before.heads[learns][0])
    p_after = fresh.decide_batch(questions)
    assert np.mean([d.details[f"p_{learns}"] for d in p_after]) > np.mean([d.details[f"p_{learns}"] for d in p_before])


def test_the_helps_target_learns_only_from_labelled_feedback(encoder, train, test_questions):
    gate = StackedGate(encoder, members=SMALL, target="helps", **LOGISTIC).fit_outcomes(train)
    before = gate.combiner_.logistic
    # Answers with retrieval give no label; a wrong direct answer to a question already
    # answered wrongly with retrieval is both wrong: dropped, as the feedback rule says.
    for question in test_questions[:20]:
        gate.record_feedback(question, retrieved=True, correct=False)
        assert gate.record_feedback(question, retrieved=False, correct=False).label is None
    unchanged = gate.refit().combiner_.logistic
    np.testing.assert_allclose(unchanged.heads["helps"][0], before.heads["helps"][0], rtol=0, atol=1e-12)
    assert unchanged.base_rate == pytest.approx(before.base_rate, abs=1e-12)

    learned = test_questions[20:50]
    p_before = gate.score(learned)
    for question in learned:
        assert gate.record_feedback(question, retrieved=False, correct=False).label == UNKNOWN
    gate.refit()
    assert np.mean(gate.score(learned)) > np.mean(p_before)
    assert gate.threshold_ == gate.combiner_.logistic.base_rate > before.base_rate  # 30 more rows where retrieval helps


def test_refit_without_feedback_leaves_the_scores_unchanged(fresh, held_out):
    # the rows kept with the gate (saved and loaded here) are those its combiner was fitted on
    before = fresh.score(held_out)
    np.testing.assert_allclose(fresh.refit().score(held_out), before, rtol=0, atol=1e-12)


def test_feedback_on_a_training_question_takes_its_out_of_fold_scores(fresh, train, test_questions, monkeypatch):
    scored = []
    for gate in fresh.members_.values():

        def spy(questions, _score=gate.score):
            scored.append(list(questions))
            return _score(questions)

        monkeypatch.setattr(gate, "score", spy)
    fresh.record_feedback(train[0].question.upper() + "?", retrieved=False, correct=True)  # one of its rows
    fresh.record_feedback(test_questions[0], retrieved=False, correct=True)
    fresh.refit()
    # a serving member would score its own training row in-sample: only the new question is scored
    assert scored == [[test_questions[0]]] * 3


def test_feedback_and_the_refitted_combiner_are_saved_with_the_gate(fresh, encoder, train, test_questions, tmp_path):
    for question in [r.question for r in train[:20]]:
        fresh.record_feedback(question, retrieved=False, correct=False)
    fresh.record_feedback(test_questions[0], retrieved=True, correct=True)
    fresh.refit()
    path = fresh.save(tmp_path / "g")
    assert (path / FEEDBACK_FILE).is_file()
    loaded = load_gate(path, embedder=encoder)
    assert loaded.feedback_.entries() == fresh.feedback_.entries()
    np.testing.assert_array_equal(loaded.score(test_questions), fresh.score(test_questions))  # the refitted combiner
    # the kept outcome rows too: after more feedback both refit to the same combiner
    for gate in (fresh, loaded):
        gate.record_feedback(test_questions[1], retrieved=False, correct=True)
        gate.refit()
    np.testing.assert_allclose(loaded.score(test_questions), fresh.score(test_questions), rtol=0, atol=1e-12)

    (path / FEEDBACK_FILE).write_text((path / FEEDBACK_FILE).read_text().replace('"correct": false', '"correct": true'))
    with pytest.raises(GateLoadError, match=f"'{FEEDBACK_FILE}' does not match its checksum"):
        load_gate(path, embedder=encoder)


def test_a_refitted_calibrated_gate_says_its_calibration_is_stale(fresh, test_questions, caplog):
    fresh.calibrate(test_questions, target_rate=0.3)
    fresh.record_feedback(test_questions[0], retrieved=False, correct=False)
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.gates.stacked"):
        fresh.refit()
    assert "calibrate it again" in caplog.text


def test_feedback_is_refused_before_fitting_or_when_malformed(fresh, test_questions):
    assert fresh.learns_online
    with pytest.raises(TypeError, match="retrieved must be a bool"):
        fresh.record_feedback(test_questions[0], "yes", True)
    assert len(fresh.feedback_) == 0
    for call in (lambda g: g.record_feedback(test_questions[0], False, True), lambda g: g.refit()):
        with pytest.raises(NotFittedError):
            call(StackedGate(members=SMALL))


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"members": "skr-knn,verbalized"}, "unknown member gate"),
        ({"members": "skr-knn,skr-knn"}, "must not repeat"),
        ({"members": "", "features": False, "embedding": False}, "needs members, question features, the question's"),
        ({"model": "forest"}, "model must be one of"),
        ({"embedding_dims": 0}, r"embedding_dims must be an integer in \[1, 65536\], got 0"),
        ({"embedding_dims": 65537}, r"embedding_dims must be an integer in \[1, 65536\], got 65537"),
        ({"target": "accuracy"}, "target must be one of"),
        ({"C": 0}, "C must be a positive number"),
    ],
)
def test_bad_parameters_are_refused(bad, message):
    with pytest.raises(ValueError, match=message):
        StackedGate(**bad)


def _eval(split, out, *flags):
    return main(
        [
            "eval",
            "--gate",
            "stacked",
            "--train",
            str(split / "train.jsonl"),
            "--test",
            str(split / "test.jsonl"),
            "--json",
            str(out),
            *flags,
        ]
    )


def test_cli_eval_with_the_default_members(split, tmp_path, capsys):
    out = tmp_path / "r.json"
    assert _eval(split, out) == 0
    report = json.loads(out.read_text())
    with open(split / "train.jsonl") as train, open(split / "test.jsonl") as test:
        n_train, n = sum(1 for _ in train), sum(1 for _ in test)
    assert report["gate"] == "stacked" and report["n"] == n and report["n_train"] == n_train
    # the default blend's threshold is a place among its training scores' ranks
    assert 0 < report["threshold"] < 1 and len(report["curve"]) == n + 1
    assert report["gap_capture"] is not None and 0 <= report["decision_auroc"] <= 1
    assert capsys.readouterr().out.startswith(f"stacked: n={n} ")


def test_cli_eval_picks_members_and_target(split, tmp_path):
    out = tmp_path / "r.json"
    assert _eval(split, out, "--option", f"members={SMALL}", "--option", "target=helps", "--target-rate", "0.3") == 0
    report = json.loads(out.read_text())
    assert report["at_threshold"]["target_rate"] == 0.3
    assert abs(report["at_threshold"]["retrieval_rate"] - 0.3) < 0.15


def test_cli_refuses_an_unknown_member_before_any_work(split, tmp_path, capsys):
    assert _eval(split, tmp_path / "r.json", "--option", "members=skr-knn,seakr") == 2
    err = capsys.readouterr().err
    assert "adaptive-gates: error: gate 'stacked': unknown member gate(s) seakr" in err
    assert not (tmp_path / "r.json").exists()
