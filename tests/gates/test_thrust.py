"""Thrust and its BM25 baseline: the formula by hand, the K rule, percentile levels on
held-out real questions, persistence, degenerate input, real SmolLM2 hidden states, CLI."""

import json
import math

import numpy as np
import pytest

from adaptive_gates import (
    BackendError,
    BM25DifficultyGate,
    GateLoadError,
    LMHiddenStateRepresenter,
    ThrustGate,
    load_gate,
)
from adaptive_gates.cli import main
from adaptive_gates.gates.thrust import EPSILON, n_clusters
from adaptive_gates.models import default_embedder
from adaptive_gates.records.data import load_outcomes, write_jsonl


class PointRepresenter:
    """Texts name points of a table, so every distance can be checked by hand."""

    def __init__(self, points, model_id="points-2d"):
        self.points = {name: np.asarray(p, dtype=np.float32) for name, p in points.items()}
        self.model_id = model_id
        self.dimension = len(next(iter(self.points.values())))

    def embed(self, texts):
        return np.stack([self.points[t] for t in texts])


# Three clusters for K = max(ceil(4^(1/4)), 3) = 3: {a1, a2} (centroid (0, 1), size 2),
# {b} at (4, 1) and {c} at (1, -3), each of size 1.
HAND = {"a1": (0, 0), "a2": (0, 2), "b": (4, 1), "c": (1, -3), "q": (1, 1), "on_a": (0, 1)}


def hand_gate(**params):
    return ThrustGate(PointRepresenter(HAND), **params).fit(["a1", "a2", "b", "c"])


@pytest.mark.parametrize("scale, factor", [("paper", 1 / 3), ("code", 1.0)])
def test_score_formula_by_hand(scale, factor):
    gate = hand_gate(scale=scale)
    assert gate.n_clusters_ == [3] and sorted(gate.cluster_sizes_) == [1, 1, 2]
    # q = (1, 1):  d_A = (0,1)-(1,1) = (-1, 0), |d| = 1: 2/1 * (-1, 0)      = (-2, 0)
    #              d_B = (4,1)-(1,1) = ( 3, 0), |d| = 3: 1/9 * ( 1, 0)      = (1/9, 0)
    #              d_C = (1,-3)-(1,1) = (0, -4), |d| = 4: 1/16 * (0, -1)    = (0, -1/16)
    # sum = (-17/9, -1/16); the paper divides by N*K = 1*3. Need score: -s / |D| = -s / 4.
    expected = math.hypot(-17 / 9 * factor, -1 / 16 * factor)
    d = gate.decide("q")
    assert d.details["thrust"] == pytest.approx(expected, rel=1e-6)
    assert d.score == pytest.approx(-expected / 4, rel=1e-6)
    assert d.details["nearest_centroid_distance"] == pytest.approx(1.0)
    assert d.details["nearest_cluster"]["size"] == 2 and d.details["nearest_cluster"]["class"] == "all"
    assert d.details["classes"] == [
        {"class": "all", "thrust": pytest.approx(expected, rel=1e-6), "nearest_distance": pytest.approx(1.0)}
    ]


def test_query_on_a_centroid_gets_a_huge_finite_pull():
    gate = hand_gate()
    d = gate.decide("on_a")
    # The A term is 2/EPSILON² (over N*K = 3) and swamps the others.
    assert d.error is None and math.isfinite(d.score)
    assert d.details["thrust"] == pytest.approx(2 / EPSILON**2 / 3, rel=1e-6)
    assert d.details["nearest_centroid_distance"] == 0.0 and d.retrieve is False


def test_scores_match_a_plain_per_pair_loop():
    """The vectorised formula against a direct loop over pairs, on vectors with large
    norms (where the expanded distance form is weakest), including queries near and
    exactly on a centroid."""
    rng = np.random.default_rng(3)
    points = {f"f{i}": p for i, p in enumerate(rng.normal(size=(60, 8)) * 50 + 100)}
    centroids = ThrustGate(PointRepresenter(points), random_state=1).fit(list(points), ["x", "y"] * 30).centroids_
    probes = {f"p{i}": p for i, p in enumerate(rng.normal(size=(6, 8)) * 50 + 100)}
    probes.update(near=centroids[1] + 0.01, close=centroids[2] + 1.0, on=centroids[4])
    rep = PointRepresenter({**points, **probes})
    gate = ThrustGate(rep, random_state=1).fit(list(points), ["x", "y"] * 30)  # the same clusters
    centroids, sizes = gate.centroids_, gate.cluster_sizes_
    for name, decision in zip(probes, gate.decide_batch(list(probes))):
        q = rep.embed([name])[0].astype(np.float64)
        total = np.zeros(8)
        for m, size in zip(centroids, sizes):
            d = m - q
            r = math.sqrt(sum(x * x for x in d))
            if r == 0.0:  # the documented guard: magnitude |C|/EPSILON², along the first axis
                total[0] += size / EPSILON**2
            else:
                total += size / max(r, EPSILON) ** 2 * d / r
        expected = math.sqrt(sum(x * x for x in total)) / len(centroids)
        assert decision.details["thrust"] == pytest.approx(expected, rel=1e-9), name


@pytest.mark.parametrize(
    "n, ceil, floor",
    [(16, 3, 3), (17, 3, 3), (81, 3, 3), (200, 4, 3), (3, 3, 3), (256, 4, 4), (257, 5, 4), (625, 5, 5), (626, 6, 5)],
)
def test_cluster_count_rule(n, ceil, floor):
    assert n_clusters(n, "ceil") == ceil and n_clusters(n, "floor") == floor


@pytest.mark.parametrize("rule, expected", [("ceil", 4), ("floor", 3)])
def test_fit_uses_the_cluster_rule(rule, expected):
    rng = np.random.default_rng(0)
    points = {f"p{i}": xy for i, xy in enumerate(rng.normal(size=(200, 2)))}
    gate = ThrustGate(PointRepresenter(points), n_clusters_rule=rule).fit(list(points))
    assert gate.n_clusters_ == [expected] and gate.cluster_sizes_.sum() == 200
    assert gate.fit_scores_.shape == (200,)


def test_bad_parameters_are_refused():
    for bad in ({"n_clusters_rule": "round"}, {"scale": "x"}, {"level_scores": "x"}, {"n_init": 0}):
        with pytest.raises(ValueError):
            ThrustGate(PointRepresenter(HAND), **bad)
    with pytest.raises(ValueError, match="n_samples"):
        n_clusters(0)


# ----------------------------------------------------------------------------- degenerate input


def test_fewer_distinct_points_than_clusters_clamps_k(caplog):
    gate = ThrustGate(PointRepresenter(HAND)).fit(["a1", "b"])
    assert gate.n_clusters_ == [2] and "cannot form 3 clusters" in caplog.text
    assert gate.decide("q").error is None


def test_all_duplicate_queries_form_one_cluster():
    gate = ThrustGate(PointRepresenter(HAND)).fit(["b"] * 5)
    assert gate.n_clusters_ == [1] and list(gate.cluster_sizes_) == [5]
    np.testing.assert_allclose(gate.centroids_, [[4.0, 1.0]])
    d = gate.decide("q")  # d = (3, 0): 5/9 * (1, 0), over N*K = 1
    assert d.details["thrust"] == pytest.approx(5 / 9)


def test_single_fitting_question_and_empty_fit():
    gate = ThrustGate(PointRepresenter(HAND)).fit(["c"])
    assert gate.n_clusters_ == [1] and gate.fit_scores_.shape == (1,)
    with pytest.raises(ValueError, match="at least one"):
        ThrustGate(PointRepresenter(HAND)).fit([])


@pytest.mark.parametrize("bad", ["", "   ", None])
def test_bad_query_gets_a_fallback_decision(bad):
    gate = hand_gate()
    d = gate.decide(bad)
    assert d.retrieve is True and d.error.startswith("invalid question") and math.isnan(d.score)
    good, broken = gate.decide_batch(["q", bad])
    assert good.error is None and broken.error is not None


def test_non_finite_representation_gives_a_fallback():
    points = dict(HAND, nan=(float("nan"), 0.0))
    gate = ThrustGate(PointRepresenter(points)).fit(["a1", "a2", "b", "c"])
    d = gate.decide("nan")
    assert d.retrieve is True and "NaN" in d.error
    with pytest.raises(BackendError):
        gate.score(["nan"])


# ----------------------------------------------------------------------------- classes


def test_class_labels_cluster_each_class():
    rng = np.random.default_rng(1)
    a = {f"a{i}": xy for i, xy in enumerate(rng.normal(size=(20, 2)) + np.array([-10, 0]))}
    b = {f"b{i}": xy for i, xy in enumerate(rng.normal(size=(20, 2)) + np.array([10, 0]))}
    points = {**a, **b, "near_a": (-10, 0.5)}
    gate = ThrustGate(PointRepresenter(points)).fit(list(a) + list(b), ["yes"] * 20 + ["no"] * 20)
    assert gate.class_names_ == ["yes", "no"] and gate.n_clusters_ == [3, 3] and len(gate.centroids_) == 6
    assert np.all(gate.centroids_[:3, 0] < 0) and np.all(gate.centroids_[3:, 0] > 0)
    d = gate.decide("near_a")
    by_class = {c["class"]: c for c in d.details["classes"]}
    assert by_class["yes"]["thrust"] > by_class["no"]["thrust"]
    assert by_class["yes"]["nearest_distance"] < by_class["no"]["nearest_distance"]
    assert d.details["nearest_cluster"]["class"] == "yes"
    with pytest.raises(ValueError, match="class_labels"):
        ThrustGate(PointRepresenter(points)).fit(list(a), ["yes"])


# ----------------------------------------------------------------------------- levels and persistence


def test_levels_are_calibrations_on_the_fitting_scores():
    gate = hand_gate()
    medium = gate.threshold_
    assert gate.calibration_ is None
    gate.set_level("scarce")
    assert gate.calibration_.method == "rate" and gate.calibration_.target_rate == 0.25
    assert gate.calibration_.n == 4 and gate.threshold_ > medium  # fewer retrieve
    gate.set_level(0.75)
    assert gate.calibration_.realised_rate == 0.75
    with pytest.raises(ValueError, match="level"):
        gate.set_level("plenty")
    assert gate.reset_threshold().threshold_ == medium


def test_save_load_identity(tmp_path):
    rng = np.random.default_rng(2)
    points = {f"p{i}": xy for i, xy in enumerate(rng.normal(size=(60, 2)))}
    rep = PointRepresenter(points)
    fit, probe = list(points)[:40], list(points)[40:]
    for gate in (ThrustGate(rep).fit(fit), ThrustGate(rep, scale="code").fit(fit).set_level("abundant")):
        path = gate.save(tmp_path / gate.scale)
        loaded = ThrustGate.load(path, representer=rep)
        assert loaded._json_params() == gate._json_params() and loaded.calibration_ == gate.calibration_
        np.testing.assert_array_equal(loaded.score(probe), gate.score(probe))
        assert [d.retrieve for d in loaded.decide_batch(probe)] == [d.retrieve for d in gate.decide_batch(probe)]
        assert isinstance(load_gate(path, representer=rep), ThrustGate)


def test_a_gate_saved_before_level_scores_was_renamed_loads(tmp_path):
    """The parameter ``level_scores`` was called ``fit_scores`` beside the fitted
    ``fit_scores_``; a gate saved under the old name loads with its value."""
    from adaptive_gates.persistence.saved_format import with_checksums

    rep = PointRepresenter(HAND)
    path = hand_gate(level_scores="in_sample").save(tmp_path / "thrust")
    config = json.loads((path / "config.json").read_text())
    config["params"]["fit_scores"] = config["params"].pop("level_scores")
    (path / "config.json").write_text(json.dumps(with_checksums(config)))
    loaded = ThrustGate.load(path, representer=rep)
    assert loaded.level_scores == "in_sample" and "fit_scores" not in loaded.get_params()
    assert loaded.score(["q"])[0] == hand_gate(level_scores="in_sample").score(["q"])[0]


def test_mismatched_representer_is_refused(tmp_path):
    path = hand_gate().save(tmp_path / "g")
    with pytest.raises(GateLoadError, match=r"state\.representer\.id"):
        ThrustGate.load(path, representer=PointRepresenter(HAND, model_id="other"))
    wide = PointRepresenter({k: (*v, 0.0) for k, v in HAND.items()})
    with pytest.raises(GateLoadError, match=r"state\.representer\.dimension"):
        ThrustGate.load(path, representer=wide)
    with pytest.raises(GateLoadError, match="pass representer="):
        ThrustGate.load(path)


# ----------------------------------------------------------------------------- real models


@pytest.fixture(scope="module")
def question_pool(unlabelled_questions, cached_embedder):
    """2,200 real questions from more than one data set, embedded once with MiniLM."""
    pool = list(dict.fromkeys(unlabelled_questions[:2200]))
    cached_embedder.embed(pool)
    return pool, cached_embedder


def test_levels_hold_on_held_out_questions(question_pool):
    """Fitted on 200 questions (the paper's size), each level retrieves its share of
    ~2,000 held-out ones: the mean over 40 random draws within 2 points (a single draw
    varies by ~4 points, so fewer draws would leave the mean ~1.5 points of noise)."""
    pool, rep = question_pool
    rates = []
    for seed in range(40):
        order = np.random.default_rng(seed).permutation(len(pool))
        fit, held_out = [pool[i] for i in order[:200]], [pool[i] for i in order[200:]]
        gate = ThrustGate(rep, random_state=seed).fit(fit)
        scores = gate.score(held_out)
        row = []
        for level in ("scarce", "medium", "abundant"):
            gate.set_level(level)
            row.append(gate.retrieves(scores).mean())
        rates.append(row)
    mean = np.mean(rates, axis=0)
    assert np.all(np.abs(mean - [0.25, 0.5, 0.75]) <= 0.02), mean
    # Single draws: sampling noise, up to 3 standard deviations (~5 points) on a mix of data sets.
    assert np.all(np.abs(np.array(rates) - [0.25, 0.5, 0.75]) <= 0.16), rates


def test_real_smollm2_hidden_states(tmp_path):
    questions = [
        "who wrote the play hamlet",
        "what is the capital city of france",
        "when did the second world war end",
        "how many legs does a spider have",
        "who painted the mona lisa",
        "what is the boiling point of water",
        "who discovered penicillin",
        "what year did the berlin wall fall",
        "what is the largest planet",
        "who was the first president of the united states",
        "what is the chemical symbol for gold",
        "how many continents are there",
    ]
    probes = ["Which author wrote Hamlet?", "what did the 1987 zoning board of dubuque decide", "spider legs"]
    rep = LMHiddenStateRepresenter(max_length=32)
    gate = ThrustGate(rep).fit(questions)
    assert rep.dimension == 576 and rep.model_id.endswith("[hidden layer 30, last_token, raw]")
    assert gate.n_clusters_ == [3] and gate.centroids_.shape == (3, 576)
    decisions = gate.decide_batch(probes)
    assert all(d.error is None and d.details["thrust"] > 0 and d.score < 0 for d in decisions)
    path = gate.save(tmp_path / "g")
    loaded = ThrustGate.load(path)  # rebuilds the embedded representer from the saved settings
    np.testing.assert_allclose(loaded.score(probes), gate.score(probes), rtol=1e-6)
    assert LMHiddenStateRepresenter(rep.lm, layer=30).model_id == rep.model_id  # -1 is layer 30
    with pytest.raises(GateLoadError, match=r"state\.representer\.id"):
        ThrustGate.load(path, representer=LMHiddenStateRepresenter(rep.lm, layer=15))
    with pytest.raises(GateLoadError, match=r"state\.representer\.id"):
        ThrustGate.load(path, representer=LMHiddenStateRepresenter(rep.lm, pooling="mean"))


# ----------------------------------------------------------------------------- bm25-difficulty

FITTING = [
    "who wrote the play hamlet",
    "who wrote the novel war and peace",
    "who painted the mona lisa",
    "who painted the starry night",
    "what is the capital city of france",
    "what is the capital city of peru",
    "when did the second world war end",
    "when did the first world war start",
    "how many legs does a spider have",
]


@pytest.mark.parametrize("top_k", [3, None])
def test_bm25_familiar_query_scores_lower_need(top_k):
    gate = BM25DifficultyGate(top_k=top_k).fit(FITTING)
    same, unrelated = gate.decide_batch(["who painted the mona lisa", "quantum chromodynamics lattice gauge"])
    assert same.score < unrelated.score and unrelated.score == 0.0
    assert same.details["matches"][0]["question"] == "who painted the mona lisa"
    assert same.retrieve is False and unrelated.retrieve is True
    assert gate.fit_scores_.shape == (len(FITTING),)


def test_bm25_fit_scores_never_match_a_query_with_itself():
    # Cross-fitted (9 queries: 9 folds of one). The spider question shares no word with
    # the other fitting queries: familiarity 0, although it would match itself perfectly.
    # A duplicate in the fitting set makes it familiar.
    spider = FITTING.index("how many legs does a spider have")
    gate = BM25DifficultyGate(top_k=1).fit(FITTING)
    assert gate.fit_scores_[spider] == 0.0 and np.all(np.delete(gate.fit_scores_, spider) < 0)
    dup = BM25DifficultyGate(top_k=1).fit([*FITTING, FITTING[spider]])
    assert dup.fit_scores_[spider] < 0.0


def test_bm25_save_load_and_bad_input(tmp_path):
    gate = BM25DifficultyGate().fit(FITTING).set_level("scarce")
    loaded = load_gate(gate.save(tmp_path / "g"))
    probes = ["mona lisa painter", "berlin wall", "hamlet author", "nothing in common here"]
    np.testing.assert_array_equal(loaded.score(probes), gate.score(probes))
    assert loaded.top_k == 10 and loaded.calibration_ == gate.calibration_
    assert gate.decide("").error is not None
    assert BM25DifficultyGate().fit(["only one question"]).fit_scores_.tolist() == [0.0]
    with pytest.raises(ValueError, match="top_k"):
        BM25DifficultyGate(top_k=0)
    (tmp_path / "g" / "queries.json").write_text(json.dumps({"queries": ["x"]}))
    with pytest.raises(GateLoadError, match=r"queries\.json"):
        load_gate(tmp_path / "g")


def test_bm25_fit_on_stop_words(tmp_path):
    # Nothing to index at all: a clear error rather than a crash inside bm25s.
    with pytest.raises(ValueError, match="none of the 2 fitting questions has a word BM25 can index"):
        BM25DifficultyGate().fit(["is it to be", "to be or not to be"])
    # Some stop-word-only questions: a cross-fitting fold made of them alone matches
    # nothing (familiarity 0), and the gate still knows its content words.
    gate = BM25DifficultyGate().fit(["who wrote the play hamlet", "is it to be", "or not to be"])
    assert gate.fit_scores_.tolist() == [0.0, 0.0, 0.0]
    familiar, stop_words = gate.decide_batch(["hamlet play author", "to be or not to be"])
    assert familiar.score < 0.0 and familiar.details["matches"][0]["question"] == "who wrote the play hamlet"
    assert stop_words.error is None and stop_words.score == 0.0 and stop_words.details["matches"] == []
    np.testing.assert_array_equal(load_gate(gate.save(tmp_path / "g")).score(["hamlet"]), gate.score(["hamlet"]))


# ----------------------------------------------------------------------------- CLI


@pytest.fixture(scope="module")
def split(outcome_records, tmp_path_factory):
    root = tmp_path_factory.mktemp("data")
    n = len(outcome_records)
    cut, small, small_end = n * 7 // 10, n // 4, n // 4 + n // 8
    write_jsonl(root / "train.jsonl", [r.to_json() for r in outcome_records[:cut]])
    write_jsonl(root / "test.jsonl", [r.to_json() for r in outcome_records[cut:]])
    write_jsonl(root / "small_train.jsonl", [r.to_json() for r in outcome_records[:small]])
    write_jsonl(root / "small_test.jsonl", [r.to_json() for r in outcome_records[small:small_end]])
    return root


@pytest.mark.parametrize(
    "gate, train, test, extra",
    [
        ("bm25-difficulty", "train", "test", []),
        ("thrust", "train", "test", ["--representer", "embedder"]),
        ("thrust", "small_train", "small_test", ["--layer", "4", "--pooling", "mean"]),
    ],
)
def test_cli_eval(split, tmp_path, gate, train, test, extra):
    out = tmp_path / "r.json"
    code = main(
        [
            "eval",
            "--gate",
            gate,
            "--train",
            str(split / f"{train}.jsonl"),
            "--test",
            str(split / f"{test}.jsonl"),
            "--json",
            str(out),
            "--target-rate",
            "0.5",
            *extra,
        ]
    )
    assert code == 0
    report = json.loads(out.read_text())
    assert report["gate"] == gate and report["gap_capture"] is not None and 0 < report["decision_auroc"] < 1
    assert 0.2 <= report["at_threshold"]["retrieval_rate"] <= 0.8


def test_cli_fit_saves_a_thrust_gate_that_loads_alone(split, tmp_path):
    out = tmp_path / "gate"
    assert (
        main(
            [
                "fit",
                "--gate",
                "thrust",
                "--train",
                str(split / "train.jsonl"),
                "--out",
                str(out),
                "--representer",
                "embedder",
                "--option",
                "n_clusters_rule=floor",
            ]
        )
        == 0
    )
    gate = ThrustGate.load(out)
    n_train = len(load_outcomes(split / "train.jsonl"))
    assert gate.n_clusters_rule == "floor" and gate.n_clusters_ == [n_clusters(n_train, "floor")]
    assert gate.representer is default_embedder()  # the embedded MiniLM, rebuilt from the saved settings


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--gate", "skr-knn", "--layer", "4"], "has no representer"),
        (["--gate", "bm25-difficulty", "--embedder", "x"], "uses no embedder"),
        (["--gate", "thrust", "--representer", "embedder", "--pooling", "mean"], "go with --representer lm"),
        (["--gate", "thrust", "--embedder", "x"], "goes with --representer embedder"),
    ],
)
def test_cli_refuses_backend_flags_that_do_not_fit(split, tmp_path, capsys, argv, message):
    assert (
        main(
            [
                "eval",
                *argv,
                "--train",
                str(split / "train.jsonl"),
                "--test",
                str(split / "test.jsonl"),
                "--json",
                str(tmp_path / "r.json"),
            ]
        )
        == 2
    )
    assert message in capsys.readouterr().err
