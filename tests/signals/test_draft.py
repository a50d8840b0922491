"""The draft's features on real data: Llama-3.1-8B's drafts of the bundled HotpotQA
questions against real BM25 hits over those questions' own Wikipedia paragraphs
(bundled with the outcomes). Agreement, hedges and answer-type checks mean what they
say, and no bad input raises."""

import math
import time

import numpy as np
import pytest

from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.records.selfknowledge import outcome_scores
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.signals.draft import DRAFT_FEATURE_NAMES, answer_kind, draft_features, explain, hedge, read_draft

COLUMN = {name: i for i, name in enumerate(DRAFT_FEATURE_NAMES)}


@pytest.fixture(scope="module")
def hotpot():
    """The 500 bundled HotpotQA records and a BM25 index over their context paragraphs."""
    records = adarague_outcomes("hotpotqa")
    paragraphs = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    corpus = [CorpusRecord(f"h{i}", title, text) for i, (title, text) in enumerate(paragraphs)]
    return records, BM25Retriever.from_records(corpus)


@pytest.fixture(scope="module")
def features(hotpot):
    records, retriever = hotpot
    questions = [r.question for r in records]
    hits = retriever.search_batch(questions, 3)
    return draft_features(
        questions,
        [r.pred_no_retrieval for r in records],
        [[h.as_passage() for h in row] for row in hits],
        [[h.score for h in row] for row in hits],
    )


def test_a_draft_in_a_passage_agrees_and_one_absent_does_not(hotpot) -> None:
    records, retriever = hotpot
    question = records[0].question
    hits = retriever.search(question, 3)
    passages, scores = [h.as_passage() for h in hits], [h.score for h in hits]
    opening = " ".join(hits[1].text.split()[:6])  # words only the second passage holds

    inside = read_draft(question, opening, passages, scores)
    row = dict(zip(DRAFT_FEATURE_NAMES, inside.values()))
    assert inside.containing == (1,)
    assert row["agree_any"] == row["overlap_best"] == 1.0 and row["agree_share"] == pytest.approx(1 / 3)
    assert row["agree_top"] == 0.0
    assert explain(inside)[0] == "the draft appears in passage 2"
    top = read_draft(question, hits[0].title, passages, scores)
    assert 0 in top.containing and top.values()[COLUMN["agree_top"]] == 1.0

    absent = dict(zip(DRAFT_FEATURE_NAMES, read_draft(question, "Zyxqv Quokkaburg", passages, scores).values()))
    assert absent["agree_any"] == absent["agree_top"] == absent["agree_share"] == absent["overlap_best"] == 0.0
    assert absent["bm25_top"] == pytest.approx(math.log1p(hits[0].score))
    assert absent["bm25_gap"] == pytest.approx((hits[0].score - hits[1].score) / hits[0].score)


def test_agreement_with_the_passages_predicts_a_right_draft(hotpot, features) -> None:
    a, _ = outcome_scores(hotpot[0])
    agrees = features[:, COLUMN["agree_any"]] == 1
    assert 0.2 < agrees.mean() < 0.8
    # Llama's draft is right about three times as often when a passage states it.
    assert a[agrees].mean() > 2 * a[~agrees].mean()


@pytest.mark.parametrize(
    "draft",
    ["I don't know", "Not available", "unknown", "N/A", "There is no information about Puss in Boots season 6"],
)
def test_hedges_are_found(draft: str) -> None:
    assert hedge(draft)
    reading = read_draft("who wrote it?", draft, ["Unknown Pleasures is an album by Joy Division."], [3.0])
    assert reading.values()[COLUMN["draft_hedge"]] == 1.0
    assert reading.values()[COLUMN["agree_any"]] == 0.0  # a hedge agrees with nothing
    assert reading.mismatch is None
    assert explain(reading)[0] == f"the draft is a hedge: {reading.hedge!r}"


def test_real_answers_are_no_hedges() -> None:
    for draft in ("Elton John", "Isaac Newton", "August 29, 1949", "No Doubt", "Tomb of the Unknown Soldier", "yes"):
        assert hedge(draft) is None, draft
    drafts = [r.pred_no_retrieval for r in adarague_outcomes()]
    hedged = [d for d in drafts if hedge(d)]
    assert 20 <= len(hedged) <= 60  # Llama hedges rarely: "Not available", "not specified", ...
    assert "Not available" in hedged


@pytest.mark.parametrize(
    ("question", "right", "wrong", "kind"),
    [
        ("when was the first soviet atomic bomb tested", "August 29, 1949", "Kazakhstan", "time"),
        ("In what year was the Eiffel Tower finished?", "1889", "Gustave Eiffel", "time"),
        ("how many episodes are there of seven seconds", "eight", "Netflix", "count"),
        ("who sings i wont let the sun go down on me", "Elton John", "a british singer", "person"),
        ("Are Edward F. Cline and Floyd Mutrux both screenwriters?", "yes", "Edward F. Cline", "yes_no"),
        ("who sings i wont let the sun go down on me", "Elton John", "No.", "yes_no"),
    ],
)
def test_answer_kind_mismatches(question: str, right: str, wrong: str, kind: str) -> None:
    def mismatch(draft: str) -> dict[str, float]:
        row = dict(zip(DRAFT_FEATURE_NAMES, read_draft(question, draft, [], []).values()))
        return {k: v for k, v in row.items() if k.startswith("mismatch_")}

    assert sum(mismatch(right).values()) == 0
    assert mismatch(wrong) == {name: float(name == f"mismatch_{kind}") for name in mismatch(wrong)}
    assert explain(read_draft(question, wrong, [], []))[0].startswith("a ")


def test_question_kinds() -> None:
    assert answer_kind("Which year did Rome fall?") == "time"
    assert answer_kind("How many moons has Mars?") == "count"
    assert answer_kind("Whose portrait hangs there?") is None
    assert answer_kind("Where was Newton born?") is None  # "born" asks for a place here
    assert answer_kind("") is None


def test_bad_inputs_give_defined_values() -> None:
    passages = ["Paris is the capital of France.", "Lyon is a city."]
    long_draft = "The answer is Paris. " * 2500  # 52,500 characters
    cases = {
        "empty": ("Capital of France?", "", passages, [5.0, 2.0]),
        "spaces": ("Capital of France?", "   \n ", passages, [5.0, 2.0]),
        "not text": ("Capital of France?", None, passages, [5.0, 2.0]),
        "long": ("Capital of France?", long_draft, passages, [5.0, 2.0]),
        "no passages": ("Capital of France?", "Paris", [], []),
        "bad scores": ("Capital of France?", "Paris", passages, [float("nan"), -1.0]),
        "empty question": ("", "Paris", passages, [1.0, 1.0]),
    }
    start = time.perf_counter()
    rows = {name: dict(zip(DRAFT_FEATURE_NAMES, read_draft(*case).values())) for name, case in cases.items()}
    assert time.perf_counter() - start < 5
    for name, row in rows.items():
        assert all(math.isfinite(v) for v in row.values()), name
    for name in ("empty", "spaces", "not text"):
        assert rows[name]["draft_empty"] == 1.0 and rows[name]["agree_any"] == 0.0
        assert rows[name]["draft_log_words"] == 0.0
    assert rows["long"]["draft_repetition"] > 0.99 and rows["long"]["agree_any"] == 0.0
    assert rows["long"]["overlap_best"] > 0  # "paris" is in passage 1
    assert rows["no passages"]["n_passages"] == rows["no passages"]["bm25_top"] == 0.0
    assert explain(read_draft(*cases["no passages"])) == ["no passages were retrieved"]
    assert rows["bad scores"]["bm25_top"] == rows["bad scores"]["bm25_gap"] == 0.0
    assert rows["bad scores"]["agree_top"] == 1.0
    matrix = draft_features(*(list(column) for column in zip(*cases.values())))
    assert matrix.shape == (len(cases), len(DRAFT_FEATURE_NAMES)) and np.all(np.isfinite(matrix))
    assert draft_features([], [], [], []).shape == (0, len(DRAFT_FEATURE_NAMES))
    with pytest.raises(ValueError, match="one of each per question"):
        draft_features(["q"], [], [[]], [[]])
    with pytest.raises(ValueError, match="scores for"):
        read_draft("q", "d", ["p"], [])
