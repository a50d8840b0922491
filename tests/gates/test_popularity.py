"""The popularity gate: word rarity from wordfreq (and the user's corpus) as the need
score, on real questions; its threshold, persistence and refusal of tampered files."""

import json

import numpy as np
import pytest

from adaptive_gates import GateLoadError, PopularityGate, load_gate, outcome_scores
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.signals.word_rarity import WordRarity, capitalised_spans, content_words

#: Real AdaRAGUE questions (NQ, HotpotQA, TriviaQA): each about an obscure subject,
#: then one about a well-known subject of the same kind.
RARE_VS_COMMON = [
    # an obscure figure of the Mahabharata vs the head of state of China
    ("who is the only kaurava who survived the kurukshetra war", "who is the head of the state of china"),
    # an assassin few have heard of vs Shakespeare
    (
        "Veljko Čubrilović was involved in the assassination of which heir to the Austro-Hungarian throne?",
        "Who is the mother of Mary Robinson in Shakespeare's \"The Winter's Tale\"",
    ),
    # a painter by his birth name vs David Beckham
    (
        "By what name is the 16th century painter Domenikos Theotokopoulos better known?",
        "David Beckham retired in 2013 after playing 10 games for which French club?",
    ),
]


@pytest.mark.parametrize("rule", ["min", "entity", "mean"])
@pytest.mark.parametrize("rare, common", RARE_VS_COMMON)
def test_a_rare_subject_needs_retrieval_more_than_a_famous_one(rule, rare, common):
    gate = PopularityGate(rule=rule)
    rare_score, common_score = gate.score([rare, common])
    assert rare_score > common_score
    decisions = gate.decide_batch([rare, common])
    assert decisions[0].details["min_zipf"] < 3.0 < decisions[1].details["min_zipf"]
    if rule != "mean":  # the rarest word (or name) decides: Zipf 3 falls between the two
        assert [d.retrieve for d in decisions] == [True, False]


def test_content_words_and_capitalised_spans():
    question = "Which 1969 Elvis Presley hit was also a hit for the group Fine Young Cannibals in 1985?"
    assert content_words(question) == ["elvis", "presley", "hit", "hit", "group", "fine", "young", "cannibals"]
    assert capitalised_spans(question) == ["Elvis Presley", "Fine Young Cannibals"]
    # "Who" opens the question and is no name; a name may open it
    assert capitalised_spans("Who is Colin Kaepernick and what is his preferred nickname?") == ["Colin Kaepernick"]
    assert capitalised_spans("Newton wrote what in 1687?") == ["Newton"]


def test_rules_score_what_they_say():
    rated = WordRarity().rate("who played joel in the last of us")
    zipfs = rated.content_zipfs
    assert len(zipfs) == 2  # "played", "joel": the rest are stop words
    scores = {
        rule: PopularityGate(rule=rule).score(["who played joel in the last of us"])[0]
        for rule in ("min", "mean", "rare_count", "total")
    }
    assert scores["min"] == pytest.approx(8 - min(zipfs))
    assert scores["mean"] == pytest.approx(8 - np.mean(zipfs))
    assert scores["rare_count"] == sum(z < 3 for z in zipfs)
    assert scores["total"] == pytest.approx(sum(8 - z for z in zipfs))
    # nothing but stop words: nothing to judge, scored where the fallback decision stands
    assert PopularityGate().score(["who is it"])[0] == 8.0
    assert PopularityGate(fallback_retrieve=False).score(["who is it"])[0] == 0.0


def test_a_corpus_makes_its_own_terms_less_rare():
    question = "what does the wronskian of two solutions tell us"
    before = PopularityGate().score([question])[0]
    corpus = [
        CorpusRecord(str(i), "Wronskian", "The Wronskian of solutions is zero when they are dependent.")
        for i in range(50)
    ]
    gate = PopularityGate().fit(corpus)
    assert gate.rarity_.has_corpus
    assert gate.score([question])[0] < before
    with pytest.raises(ValueError, match="no words"):
        PopularityGate().fit(["", "  "])


def test_fit_outcomes_takes_the_most_accurate_threshold(outcome_records):
    gate = PopularityGate().fit_outcomes(outcome_records)
    scores = gate.score([r.question for r in outcome_records])
    a, b = outcome_scores(outcome_records)
    retrieve = gate.retrieves(scores)
    accuracy = np.where(retrieve, b, a).mean()
    assert gate.calibration_.method == "objective"
    assert accuracy == pytest.approx(gate.calibration_.accuracy)
    # no threshold on these scores does better
    for t in np.unique(scores):
        assert np.where(scores > t, b, a).mean() <= accuracy + 1e-12


def test_round_trip_and_refusal_of_tampered_files(outcome_records, tmp_path):
    questions = [r.question for r in outcome_records[:50]]
    gate = PopularityGate(rule="entity").fit([r.question for r in outcome_records[50:]])
    gate.calibrate(questions, target_rate=0.3)
    gate.save(tmp_path / "g")
    loaded = load_gate(tmp_path / "g")
    assert isinstance(loaded, PopularityGate) and loaded.rule == "entity"
    np.testing.assert_array_equal(loaded.score(questions), gate.score(questions))
    assert loaded.threshold_ == gate.threshold_

    counts = np.load(tmp_path / "g" / "counts.npy")
    np.save(tmp_path / "g" / "counts.npy", counts + 1)
    with pytest.raises(GateLoadError, match=r"'counts\.npy' does not match its checksum"):
        load_gate(tmp_path / "g")

    gate.save(tmp_path / "h")
    vocabulary = json.loads((tmp_path / "h" / "vocabulary.json").read_text())
    vocabulary["words"][0] = "tampered"
    (tmp_path / "h" / "vocabulary.json").write_text(json.dumps(vocabulary))
    with pytest.raises(GateLoadError, match=r"'vocabulary\.json' does not match its checksum"):
        load_gate(tmp_path / "h")


def test_a_gate_without_corpus_saves_no_vocabulary(tmp_path):
    PopularityGate().save(tmp_path / "g")
    assert sorted(p.name for p in (tmp_path / "g").iterdir()) == ["config.json"]
    assert load_gate(tmp_path / "g").score(["who is the only kaurava who survived the kurukshetra war"])[0] > 5


def test_bad_rule_is_refused():
    with pytest.raises(ValueError, match="rule must be one of"):
        PopularityGate(rule="max")
