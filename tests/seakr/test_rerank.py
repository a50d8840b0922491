"""SeaKR's re-ranking: snippets ordered by the LLM's uncertainty after each one."""

from __future__ import annotations

import math

import pytest
from langchain_core.documents import Document

from adaptive_gates.seakr.rerank import DEFAULT_RERANK_TEMPLATE, RankedSnippet, UncertaintyReranker
from adaptive_gates.seakr.uncertainty import SelfAwareUncertainty


@pytest.fixture(scope="module")
def reranker(lm):
    return UncertaintyReranker(SelfAwareUncertainty(lm, k=2, max_new_tokens=6))


def test_snippets_come_back_by_rising_uncertainty_with_their_items(reranker, wiki_paragraphs, one_torch_thread):
    paragraph = wiki_paragraphs[0]
    snippets = [
        Document(page_content=paragraph.text[:300]),
        "The Eiffel Tower is a wrought-iron lattice tower in Paris, France.",
    ]
    ranked = reranker.rerank("Where is the Eiffel Tower?", snippets)
    assert sorted(r.index for r in ranked) == [0, 1]
    assert all(isinstance(r, RankedSnippet) and r.error is None for r in ranked)
    assert [r.uncertainty for r in ranked] == sorted(r.uncertainty for r in ranked)
    for r in ranked:
        assert r.item is snippets[r.index]
        assert r.text == " ".join((snippets[r.index] if r.index else snippets[0].page_content).split())
        assert r.uncertainty == (r.estimate.value if r.estimate.defined else math.inf)


def test_the_reasoning_so_far_goes_into_the_context(lm, one_torch_thread):
    template = "Context: {snippet}\nQ: {question}\nA:{reasoning}"
    seen = UncertaintyReranker(
        SelfAwareUncertainty(lm, k=2, max_new_tokens=4), prompt_template=template, formatted=True
    )
    ranked = seen.rerank("Who built it?", ["It was built by Eiffel."], reasoning="  The tower  ")
    assert len(ranked) == 1 and ranked[0].estimate is not None
    assert "{snippet}" in DEFAULT_RERANK_TEMPLATE and "{reasoning}" in DEFAULT_RERANK_TEMPLATE


def test_bad_input_is_refused_before_any_estimate(reranker):
    with pytest.raises(ValueError, match=r"question must be a non-empty string"):
        reranker.rerank("  ", ["x"])
    with pytest.raises(ValueError, match=r"got a single string"):
        reranker.rerank("q?", "a snippet")
    with pytest.raises(ValueError, match=r"snippet 1 is empty"):
        reranker.rerank("q?", ["fine", "   "])
    with pytest.raises(TypeError, match=r"snippet 0: a snippet must be a str"):
        reranker.rerank("q?", [42])
    with pytest.raises(ValueError, match=r"reasoning must be a str"):
        reranker.rerank("q?", ["x"], reasoning=None)
    assert reranker.rerank("q?", []) == []


def test_bad_settings_are_refused(lm):
    with pytest.raises(ValueError, match=r"must be a SelfAwareUncertainty"):
        UncertaintyReranker({"k": 2})
    with pytest.raises(ValueError, match=r"\{snippet\}"):
        UncertaintyReranker(SelfAwareUncertainty(lm, k=2), prompt_template="Q: {question}")
    with pytest.raises(ValueError, match=r"stop strings"):
        UncertaintyReranker(SelfAwareUncertainty(lm, k=2), stop=[""])


def test_a_failing_estimate_ranks_last_with_its_reason(lm, one_torch_thread):
    # a context longer than the model takes cannot be measured
    window = lm.model.config.max_position_embeddings
    reranker = UncertaintyReranker(SelfAwareUncertainty(lm, k=2, max_new_tokens=4))
    ranked = reranker.rerank("Who built it?", ["word " * (window + 10), "It was built by Gustave Eiffel."])
    assert [r.index for r in ranked] == [1, 0]
    assert ranked[1].uncertainty == math.inf and ranked[1].estimate is None
    assert ranked[1].error
