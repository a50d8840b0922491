"""SKR gates: the voting rules by hand, real-embedder behaviour, bad input, faults."""

import asyncio
import math
import warnings

import numpy as np
import pytest

from adaptive_gates import InvalidQuestionError, NotFittedError, SKRClassifierGate, SKRKnnGate, label_outcomes
from adaptive_gates.records.data import OutcomeRecord


class AngleEmbedder:
    """Texts "p<deg>" map to the unit vector at that angle, so every
    neighbourhood can be checked by hand: cosine similarity = cos(angle difference)."""

    model_id = "angle-table"
    dimension = 2

    def embed(self, texts):
        angles = np.radians([float(t.removeprefix("p")) for t in texts])
        return np.stack([np.cos(angles), np.sin(angles)], axis=1).astype(np.float32)


def _memory(labels):
    """Memory points at 10, 20, 30, ... degrees, nearest to a query at 0 first."""
    return [f"p{10 * (i + 1)}" for i in range(len(labels))], labels


# The 5 nearest to p0 are p10..p50 with labels 0,1,0,1,0: l=3 known, 2 unknown.
# Far away (170..200 degrees) sit the rest, setting the class sizes m and n.
NEAR = [0, 1, 0, 1, 0]


def test_ratio_rule_by_hand():
    # m = 3 + 3 = 6 known, n = 2 + 1 = 3 unknown; m/n = 2.
    questions = [f"p{a}" for a in (10, 20, 30, 40, 50, 170, 180, 190, 200)]
    labels = [*NEAR, 0, 0, 0, 1]
    gate = SKRKnnGate(AngleEmbedder(), k=5).fit(questions, labels)
    d = gate.decide("p0")
    # l/(k-l) = 3/2 = 1.5 < m/n = 2  ->  unknown  ->  retrieve.
    assert d.details["n_known"] == 3 and d.score == pytest.approx(0.4)
    assert d.threshold == pytest.approx(3 / 9)
    assert d.retrieve is True
    # The code's majority vote keeps it: 3 of 5 neighbours are known.
    majority = SKRKnnGate(AngleEmbedder(), k=5, vote="majority").fit(questions, labels)
    assert majority.decide("p0").retrieve is False


def test_ratio_rule_boundary_counts_as_known():
    # m = n: l/(k-l) >= 1 is known. With l = 2 of k = 4 the ratio equals 1 exactly.
    questions = [f"p{a}" for a in (10, 20, 30, 40, 180, 190)]
    labels = [0, 1, 0, 1, 0, 1]
    gate = SKRKnnGate(AngleEmbedder(), k=4).fit(questions, labels)
    assert gate.decide("p0").retrieve is False
    # All k known (l = k) is known too.
    all_known = SKRKnnGate(AngleEmbedder(), k=2).fit(["p10", "p20", "p180"], [0, 0, 1])
    assert all_known.decide("p0").retrieve is False


@pytest.mark.parametrize("far_labels, expected", [([0, 0], True), ([1, 1], False)])
def test_majority_tie_goes_to_the_smaller_class(far_labels, expected):
    # Neighbours p10..p40 split 2-2. Extra far points make D- (n) or D+ (m) the smaller class.
    questions = [f"p{a}" for a in (10, 20, 30, 40, 180, 190)]
    labels = [0, 1, 0, 1, *far_labels]
    gate = SKRKnnGate(AngleEmbedder(), k=4, vote="majority").fit(questions, labels)
    d = gate.decide("p0")
    assert d.score == 0.5
    assert d.retrieve is expected


def test_similarity_weighting_by_hand():
    gate = SKRKnnGate(AngleEmbedder(), k=2, weighting="similarity").fit(["p0", "p60", "p180"], [1, 0, 0])
    # Query p0: neighbours p0 (sim 1, unknown) and p60 (sim 0.5, known): weighted share 1/1.5.
    assert gate.score(["p0"])[0] == pytest.approx(1 / 1.5, abs=1e-6)


def test_k_larger_than_memory_uses_all():
    with pytest.warns(UserWarning, match="k=3 is used"):
        gate = SKRKnnGate(AngleEmbedder(), k=50).fit(["p10", "p20", "p30"], [0, 1, 1])
    d = gate.decide("p0")
    assert d.details["k"] == 3 and len(d.details["neighbours"]) == 3


def test_fit_requires_both_classes_and_valid_labels():
    with pytest.raises(ValueError, match="both known"):
        SKRKnnGate(AngleEmbedder()).fit(["p1", "p2"], [0, 0])
    with pytest.raises(ValueError, match="label 1"):
        SKRKnnGate(AngleEmbedder()).fit(["p1", "p2"], [0, 2])
    with pytest.raises(ValueError, match="labels"):
        SKRKnnGate(AngleEmbedder()).fit(["p1", "p2"], [0])
    with pytest.raises(ValueError, match="k must"):
        SKRKnnGate(AngleEmbedder(), k=0)


def test_unfitted_gate_raises_clearly():
    with pytest.raises(NotFittedError, match="fit"):
        SKRKnnGate(AngleEmbedder()).decide("p0")


def test_label_outcomes_tie_policies():
    rec = lambda i, a, b: OutcomeRecord(str(i), f"q{i}", ["paris"], a, b)  # noqa: E731
    records = [rec(0, "paris", "paris"), rec(1, "rome", "paris"), rec(2, "paris", "rome"), rec(3, "rome", "rome")]
    paper = label_outcomes(records, ties="known")
    assert paper.ids == ["0", "1", "2"] and paper.labels == [0, 1, 0]  # both wrong dropped
    code = label_outcomes(records, ties="drop")
    assert code.ids == ["1", "2"] and code.labels == [1, 0]  # both-right tie dropped too
    assert paper.counts == (2, 1)


# ----------------------------------------------------------------------------- real embedder


def test_real_neighbours_are_evidence(embedder):
    questions = [
        "who wrote the play hamlet",
        "what is the capital city of france",
        "when did the second world war end",
        "how many legs does a spider have",
        "who painted the mona lisa",
        "what is the boiling point of water",
    ]
    gate = SKRKnnGate(embedder, k=3).fit(questions, [0, 0, 1, 1, 0, 1])
    d = gate.decide("Which author wrote Hamlet?")
    top = d.details["neighbours"][0]
    assert top["question"] == "who wrote the play hamlet" and top["label"] == "known"
    sims = [n["similarity"] for n in d.details["neighbours"]]
    assert sims == sorted(sims, reverse=True)
    assert d.gate == "skr-knn" and d.latency_ms > 0 and d.error is None


def test_real_data_gate_beats_nothing_worse_than_chance_bounds(outcome_records, cached_embedder):
    """Fit on 80% of the real outcomes and check the score is a real, finite ranking."""
    cut = len(outcome_records) * 4 // 5
    gate = SKRKnnGate(cached_embedder, k=10, weighting="similarity").fit_outcomes(outcome_records[:cut])
    scores = gate.score([r.question for r in outcome_records[cut:]])
    assert scores.shape == (len(outcome_records) - cut,) and np.all((scores >= 0) & (scores <= 1))
    assert len(np.unique(scores)) > len(scores) / 5  # graded, not a handful of values


@pytest.fixture(scope="module")
def question_pool(unlabelled_questions):
    """Up to 8,000 real unlabelled questions from more than one data set, shuffled."""
    return unlabelled_questions[:8000]


def test_calibration_hits_target_rate_on_held_out_questions(outcome_records, cached_embedder, question_pool):
    dev, test = question_pool[: len(question_pool) // 2], question_pool[len(question_pool) // 2 :]
    for gate in (SKRKnnGate(cached_embedder, k=10, weighting="similarity"), SKRClassifierGate(cached_embedder)):
        gate.fit_outcomes(outcome_records)
        for target in (0.1, 0.3, 0.7):
            gate.calibrate(dev, target_rate=target)
            assert gate.calibration_.realised_rate == pytest.approx(target, abs=1e-3)
            rate = np.mean(gate.retrieves(gate.score(test)))
            assert abs(rate - target) <= 0.02, (gate.name, target, rate)


def test_a_threshold_for_another_rate_comes_from_the_calibration_scores(
    outcome_records, cached_embedder, question_pool, tmp_path
):
    from adaptive_gates import load_gate

    dev, test = question_pool[:2000], question_pool[2000:4000]
    gate = SKRClassifierGate(cached_embedder).fit_outcomes(outcome_records)
    with pytest.raises(ValueError, match="not calibrated"):
        gate.threshold_at_rate(0.3)
    gate.calibrate(dev, target_rate=0.3)
    assert len(gate.calibration_.score_sample) == 256
    test_scores = gate.score(test)
    for rate in (0.1, 0.5, 0.8):  # rates the gate was not calibrated to, on unseen questions
        assert abs(np.mean(test_scores > gate.threshold_at_rate(rate)) - rate) <= 0.03, rate
    gate.save(tmp_path / "gate")
    loaded = load_gate(tmp_path / "gate", embedder=cached_embedder)
    assert loaded.threshold_at_rate(0.5) == gate.threshold_at_rate(0.5)


def test_cross_fitted_calibration_sets_a_threshold_from_out_of_fold_scores(outcome_records, cached_embedder):
    from adaptive_gates.evaluation import cross_fitted_scores, fit_calibrated

    # every fold embeds the same records again: the memo embeds each once
    make = lambda: SKRKnnGate(cached_embedder, k=10, weighting="similarity")  # noqa: E731
    gate = fit_calibrated(make, outcome_records, target_rate=0.3)
    oof = cross_fitted_scores(make, outcome_records)
    assert gate.calibration_.method == "rate" and gate.calibration_.n == len(outcome_records)
    assert np.mean(oof > gate.threshold_) == pytest.approx(0.3, abs=max(0.01, 1 / len(oof)))
    objective = fit_calibrated(make, outcome_records, objective=True, max_rate=0.2)
    assert objective.calibration_.method == "objective" and objective.calibration_.realised_rate <= 0.2


def test_classifier_learns_a_separable_signal(embedder):
    known = ["what is two plus two", "what is three plus five", "what is ten minus four", "what is six times seven"]
    unknown = [
        "who won the 1987 tour de france",
        "who won the 1962 world cup",
        "who won the 1999 wimbledon final",
        "who won the 2003 champions league",
    ]
    gate = SKRClassifierGate(embedder, C=100.0).fit(known + unknown, [0] * 4 + [1] * 4)
    assert gate.decide("what is nine plus one").retrieve is False
    assert gate.decide("who won the 1975 us open").retrieve is True
    d = gate.decide("who won the 1975 us open")
    assert 0.5 < d.details["p_unknown"] <= 1 and d.score == d.details["p_unknown"]


# ----------------------------------------------------------------------------- bad input and faults


@pytest.fixture(scope="module")
def small_gate(embedder):
    return SKRKnnGate(embedder, k=1).fit(["who wrote hamlet", "capital of peru", "speed of light"], [0, 1, 1])


@pytest.mark.parametrize("bad", ["", "   \n\t", None, 42, b"bytes", ["a list"]])
def test_bad_questions_get_fallback_decisions(small_gate, bad):
    d = small_gate.decide(bad)
    assert d.retrieve is True and d.error.startswith("invalid question") and math.isnan(d.score)
    with pytest.raises(InvalidQuestionError):
        small_gate.score([bad])


@pytest.mark.parametrize(
    "batch, message",
    [
        ("some text", "single string"),
        (b"some bytes", "single string"),
        (None, "NoneType"),
        (7, "int"),
        ({"who wrote hamlet": 1}, "dict"),
    ],
)
def test_a_batch_that_is_not_a_sequence_of_questions_is_refused(small_gate, batch, message):
    # A string would otherwise be decided character by character.
    for call in (
        small_gate.decide_batch,
        small_gate.score,
        lambda b: small_gate.calibrate(b, target_rate=0.3),
        lambda b: asyncio.run(small_gate.adecide_batch(b)),
    ):
        with pytest.raises(InvalidQuestionError, match=message):
            call(batch)
    # Questions given as any iterable are fine.
    assert len(small_gate.decide_batch(q for q in ["who wrote hamlet", "speed of light"])) == 2


def test_calibrating_on_too_few_questions_warns(embedder):
    from adaptive_gates.gates.base.calibration import MIN_CALIBRATION_QUESTIONS, CalibrationWarning

    gate = SKRKnnGate(embedder, k=2, weighting="similarity").fit(
        ["who wrote hamlet", "capital of peru", "speed of light"], [0, 1, 1]
    )
    one = "on 1 question, fewer than 20: it retrieves for 0% of them against a target rate of 30%"
    with pytest.warns(CalibrationWarning, match=one) as caught:
        gate.calibrate(["who wrote macbeth"], target_rate=0.3)
    assert caught[0].filename == __file__  # it points at the calibrating code
    with pytest.warns(CalibrationWarning, match="on 2 questions.*best accuracy"):
        gate.calibrate(["who wrote macbeth", "capital of chile"], correct_without=[1, 0], correct_with=[1, 1])
    enough = [f"who wrote play number {i}" for i in range(MIN_CALIBRATION_QUESTIONS)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", CalibrationWarning)
        gate.calibrate(enough, target_rate=0.3)
    assert gate.calibration_.n == MIN_CALIBRATION_QUESTIONS


def test_huge_question_is_decided(small_gate):
    d = small_gate.decide("who wrote hamlet " * 100_000)
    assert d.error is None and len(d.question) <= 20_000


def test_batch_mixes_good_and_bad(small_gate):
    ds = small_gate.decide_batch(["who wrote hamlet", "", "speed of light?"])
    assert [d.error is None for d in ds] == [True, False, True]
    assert ds[0].details["neighbours"][0]["question"] == "who wrote hamlet"


def test_fallback_can_be_set_to_answer_directly(embedder):
    gate = SKRKnnGate(embedder, k=1, fallback_retrieve=False).fit(["a question", "another one"], [0, 1])
    assert gate.decide("  ").retrieve is False


class BrokenEmbedder:
    """A backend that fails mid-chain (a crashed server, an out-of-memory)."""

    model_id = "broken"
    dimension = 2

    def __init__(self):
        self.fail = False

    def embed(self, texts):
        if self.fail:
            raise RuntimeError("backend went away")
        return AngleEmbedder().embed(texts)


def test_failing_backend_gives_fallback_with_error():
    backend = BrokenEmbedder()
    gate = SKRKnnGate(backend, k=1).fit(["p10", "p100"], [0, 1])
    backend.fail = True
    d = gate.decide("p0")
    assert d.retrieve is True and "backend went away" in d.error and d.is_fallback


class NaNEmbedder(AngleEmbedder):
    def embed(self, texts):
        out = super().embed(texts)
        if any(t == "p5" for t in texts):
            out[:] = np.nan
        return out


def test_nan_from_backend_is_a_fallback_not_a_crash():
    gate = SKRKnnGate(NaNEmbedder(), k=1).fit(["p10", "p100"], [0, 1])
    d = gate.decide("p5")
    assert d.is_fallback and "NaN" in d.error


def test_async_decide(small_gate):
    async def run():
        return await asyncio.gather(
            small_gate.adecide("who wrote hamlet"), small_gate.adecide_batch(["capital of peru"])
        )

    one, batch = asyncio.run(run())
    assert one.retrieve is False and batch[0].retrieve is True
