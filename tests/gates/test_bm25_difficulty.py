"""IAPEK-BM25: retrieve when a query has little BM25 overlap with the fitting queries."""

from __future__ import annotations

import json

import numpy as np
import pytest

from adaptive_gates.errors import GateLoadError, InvalidQuestionError
from adaptive_gates.gates import BM25DifficultyGate


@pytest.fixture(scope="module")
def fitting(qa_records):
    return [r.question for r in qa_records[:100]]


@pytest.fixture(scope="module")
def gate(fitting):
    return BM25DifficultyGate().fit(fitting)


def test_fitting_keeps_the_queries_and_out_of_fold_scores(gate, fitting):
    assert gate.queries_ == fitting
    assert gate.fit_scores_.shape == (100,)
    assert np.all(gate.fit_scores_ <= 0)  # need = -familiarity, familiarity >= 0
    # a fitting query scored against the full index matches itself: more familiar than out of fold
    assert np.mean(gate.score(fitting[:30])) < np.mean(gate.fit_scores_[:30])


def test_a_query_like_the_fitting_ones_needs_less(gate, fitting):
    seen = fitting[0]
    unseen = "Quantum chromodynamics gluon confinement lattice?"
    scores = gate.score([seen, unseen])
    assert scores[0] < scores[1]
    assert scores[1] == 0.0  # nothing in common: familiarity 0
    decision = gate.decide(seen)
    assert decision.details["top_k"] == 10
    assert decision.details["matches"][0]["question"] == seen
    assert len(decision.details["matches"]) <= 3
    assert decision.details["familiarity"] == pytest.approx(-decision.score)


def test_repeated_or_stop_words_do_not_make_a_query_familiar(gate, fitting):
    word = fitting[0].split()[-1].strip("?")
    once, repeated = gate.score([f"{word}?", " ".join([word] * 50) + "?"])
    assert once == repeated
    assert gate.score(["who " * 200 + "?"])[0] == 0.0
    assert gate.score(["please tell me what it is?"])[0] == 0.0


def test_top_k_none_averages_over_every_fitting_query(fitting):
    everyone = BM25DifficultyGate(top_k=None).fit(fitting[:40])
    few = BM25DifficultyGate(top_k=2).fit(fitting[:40])
    q = fitting[3]
    assert everyone.decide(q).details["top_k"] == 40
    # the mean over all 40 is at most the mean of the two best matches
    assert -everyone.score([q])[0] <= -few.score([q])[0]


def test_one_fitting_query_has_a_zero_fit_score():
    gate = BM25DifficultyGate().fit(["Who painted the Mona Lisa?"])
    np.testing.assert_array_equal(gate.fit_scores_, [0.0])
    assert gate.score(["Who painted Mona Lisa in Florence?"])[0] < 0


def test_bad_fitting_questions_are_refused():
    with pytest.raises(ValueError, match=r"at least one fitting question"):
        BM25DifficultyGate().fit([])
    with pytest.raises(ValueError, match=r"has a word BM25 can index"):
        BM25DifficultyGate().fit(["who is it?", "what was that?"])
    with pytest.raises(InvalidQuestionError):
        BM25DifficultyGate().fit(["fine question", "   "])
    with pytest.raises(ValueError):
        BM25DifficultyGate(top_k=0)


def test_saved_and_loaded_it_scores_the_same(gate, fitting, tmp_path):
    path = gate.save(tmp_path / "bm25")
    config = json.loads((path / "config.json").read_text())
    assert config["state"]["n_queries"] == 100
    assert config["state"]["query_terms"] == "content-distinct"
    loaded = BM25DifficultyGate.load(path)
    np.testing.assert_allclose(
        loaded.score([*fitting[:5], "x-ray crystallography?"]), gate.score([*fitting[:5], "x-ray crystallography?"])
    )
    assert loaded.threshold_ == gate.threshold_


def test_a_saved_queries_file_is_checked(tmp_path, fitting):
    gate = BM25DifficultyGate()
    (tmp_path / "queries.json").write_text(json.dumps({"queries": fitting[:3]}))
    with pytest.raises(GateLoadError, match=r"'state.n_queries' is 4"):
        gate._load_state(tmp_path, {"n_queries": 4, "query_terms": "content-distinct"})
    with pytest.raises(GateLoadError, match=r"'state.query_terms' must be"):
        gate._load_state(tmp_path, {"n_queries": 3, "query_terms": "stemmed"})
    (tmp_path / "queries.json").write_text(json.dumps({"queries": ["ok?", ""]}))
    with pytest.raises(GateLoadError, match=r"non-empty list of questions"):
        gate._load_state(tmp_path, {"n_queries": 2})
