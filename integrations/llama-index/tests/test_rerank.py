"""SeaKR's re-ranker as a node postprocessor, on the embedded SmolLM2 over a real index."""

from __future__ import annotations

import json
import logging
import math
import os
import subprocess
import sys
import threading

import pytest
from llama_index.core.callbacks import CallbackManager, CBEventType, LlamaDebugHandler
from llama_index.core.instrumentation.events.llm import LLMChatStartEvent
from llama_index.core.instrumentation.events.rerank import ReRankEndEvent, ReRankStartEvent
from llama_index.core.query_engine import RetrieverQueryEngine
from llama_index.core.schema import MetadataMode, NodeWithScore, QueryBundle, TextNode
from llama_index.llms.adaptive_gates import AdaptiveGatesLLM
from llama_index.postprocessor.adaptive_gates import (
    ERROR_KEY,
    FAST_SAMPLING,
    PAPER_SAMPLING,
    RETRIEVAL_SCORE_KEY,
    UNCERTAINTY_KEY,
    SeaKRRerank,
)
from pydantic import ValidationError

from adaptive_gates import BackendError, SelfAwareUncertainty, UncertaintyReranker
from adaptive_gates.models import LocalCausalLM

from .conftest import brief_passage

pytestmark = pytest.mark.usefixtures("one_torch_thread")

TOP_K = 2  # the fewest nodes a re-ranking can reorder and a cut can drop from


@pytest.fixture(scope="module")
def small_uncertainty() -> SelfAwareUncertainty:
    """SeaKR's U on the embedded SmolLM2 with few, short samples, so tests stay quick:
    the orderings checked are those of the U measured, whatever the samples' length."""
    return SelfAwareUncertainty(k=4, max_new_tokens=4)


@pytest.fixture(scope="module")
def short_llm() -> AdaptiveGatesLLM:
    """The embedded SmolLM2 answering in a few tokens: the tests check what it read."""
    return AdaptiveGatesLLM(max_tokens=8)


@pytest.fixture(scope="module")
def question(boolq_questions) -> str:
    return boolq_questions[0].question


@pytest.fixture(scope="module")
def retrieved(brief_index, question) -> list[NodeWithScore]:
    """The index's top nodes for the question, as the query engine retrieves them."""
    return brief_index.as_retriever(similarity_top_k=TOP_K).retrieve(question)


@pytest.fixture(scope="module")
def measured(retrieved, question, small_uncertainty):
    """The core re-ranker's own U for the retrieved nodes, lowest first."""
    return UncertaintyReranker(small_uncertainty).rerank(question, [n.node.get_content() for n in retrieved])


def _uncertainties(nodes: list[NodeWithScore]) -> list[float]:
    return [n.node.metadata[UNCERTAINTY_KEY] for n in nodes]


def test_reranks_inside_a_query_engine(
    brief_index, short_llm, question, retrieved, measured, small_uncertainty, recorder
):
    debug = LlamaDebugHandler()
    rerank = SeaKRRerank(reranker=UncertaintyReranker(small_uncertainty), top_n=1)
    # as_query_engine() cannot take a callback manager of its own; from_args() is what it calls
    engine = RetrieverQueryEngine.from_args(
        brief_index.as_retriever(similarity_top_k=TOP_K),
        llm=short_llm,
        node_postprocessors=[rerank],
        callback_manager=CallbackManager([debug]),
    )
    response = engine.query(question)

    assert response.response.strip()
    nodes = response.source_nodes
    assert [n.node.node_id for n in nodes] == [retrieved[r.index].node.node_id for r in measured[:1]]
    assert _uncertainties(nodes) == pytest.approx([r.uncertainty for r in measured[:1]])
    assert [n.score for n in nodes] == pytest.approx([-u for u in _uncertainties(nodes)])
    assert all(n.node.metadata["title"] for n in nodes)  # the node's own metadata is kept

    start, end = recorder.of(ReRankStartEvent), recorder.of(ReRankEndEvent)
    assert len(start) == len(end) == 1
    assert start[0].query.query_str == question and start[0].top_n == 1 and "SmolLM2" in start[0].model_name
    assert [n.node.node_id for n in start[0].nodes] == [n.node.node_id for n in retrieved]
    assert [n.node.node_id for n in end[0].nodes] == [n.node.node_id for n in nodes]
    assert start[0].span_id == end[0].span_id and start[0].span_id.startswith("SeaKRRerank._postprocess_nodes-")

    # the LLM reads the re-ranked passages, without the U bookkeeping
    prompt = "\n".join(str(m.content) for e in recorder.of(LLMChatStartEvent) for m in e.messages)
    assert nodes[0].node.get_content()[:60] in prompt and UNCERTAINTY_KEY not in prompt

    (pair,) = debug.get_event_pairs(CBEventType.RERANKING)
    assert [n.node.node_id for n in pair[1].payload["nodes"]] == [n.node.node_id for n in nodes]


async def test_async_query_reranks_off_the_event_loop(
    brief_index, short_llm, question, measured, small_uncertainty, recorder
):
    threads: list[int] = []

    class ThreadRecording(SelfAwareUncertainty):
        def estimate(self, prompt, **kwargs):
            threads.append(threading.get_ident())
            return super().estimate(prompt, **kwargs)

    uncertainty = ThreadRecording(
        small_uncertainty.lm, k=small_uncertainty.k, max_new_tokens=small_uncertainty.max_new_tokens
    )
    rerank = SeaKRRerank(reranker=UncertaintyReranker(uncertainty), top_n=1)
    engine = brief_index.as_query_engine(similarity_top_k=TOP_K, node_postprocessors=[rerank], llm=short_llm)
    response = await engine.aquery(question)

    assert response.response.strip()
    assert _uncertainties(response.source_nodes) == pytest.approx([r.uncertainty for r in measured[:1]])
    assert len(threads) == TOP_K and threading.get_ident() not in threads
    start, end = recorder.of(ReRankStartEvent), recorder.of(ReRankEndEvent)
    assert len(start) == len(end) == 1 and start[0].span_id.startswith("SeaKRRerank.")


def test_top_n_and_the_uncertainty_cut_off(retrieved, question, measured, small_uncertainty):
    reranker = UncertaintyReranker(small_uncertainty)
    by_u = [retrieved[r.index].node.node_id for r in measured]
    lowest = measured[0].uncertainty  # kept (the cut-off is inclusive); the other node is cut
    kept = SeaKRRerank(reranker=reranker, top_n=None, max_uncertainty=lowest).postprocess_nodes(
        retrieved, query_str=question
    )
    assert [n.node.node_id for n in kept] == [i for i, r in zip(by_u, measured) if r.uncertainty <= lowest]
    assert 0 < len(kept) < len(retrieved) and all(u <= lowest for u in _uncertainties(kept))
    (best,) = SeaKRRerank(reranker=reranker, top_n=1).postprocess_nodes(retrieved, query_bundle=QueryBundle(question))
    assert best.node.node_id == by_u[0]


def test_answering_passage_against_unrelated_ones(boolq_questions, paragraphs, small_uncertainty):
    """The ordering rule on U the model computed: lowest first, ties in the given order,
    an empty node last. (Which passage SmolLM2-135M is surest after is not asserted:
    with 4 short samples it often is not the one that answers.) Each passage's first
    words are enough for the rule, and spare SmolLM2 the prefill of whole ones."""
    record = boolq_questions[2]
    own = next(p for p in paragraphs if p.text == record.context)
    unrelated = [p for p in paragraphs if p.text != record.context][-2:]
    nodes = [
        NodeWithScore(
            node=TextNode(text=brief_passage(own.text), id_="own", metadata={"title": own.metadata["title"]}), score=0.9
        )
    ]
    nodes += [
        NodeWithScore(node=TextNode(text=brief_passage(p.text), id_=f"other-{i}"), score=0.5)
        for i, p in enumerate(unrelated)
    ]
    nodes += [
        NodeWithScore(node=TextNode(text=brief_passage(unrelated[0].text), id_="twin"), score=0.4),
        NodeWithScore(node=TextNode(text="   ", id_="empty"), score=0.3),
    ]

    out = SeaKRRerank(reranker=UncertaintyReranker(small_uncertainty), top_n=None).postprocess_nodes(
        nodes, query_str=record.question
    )

    ids, us = [n.node.node_id for n in out], _uncertainties(out)
    assert sorted(ids) == sorted(n.node.node_id for n in nodes)
    assert us == sorted(us) and ids[-1] == "empty" and us[-1] == math.inf and out[-1].score == -math.inf
    assert all(math.isfinite(u) for u in us[:-1])
    assert ids.index("other-0") < ids.index("twin")  # the same text ties: the given order stays
    # U after a node does not depend on the other nodes: the core re-ranker gives it for "own" alone.
    (expected,) = UncertaintyReranker(small_uncertainty).rerank(record.question, [nodes[0].node.text])
    assert dict(zip(ids, us))["own"] == pytest.approx(expected.uncertainty)
    assert all(UNCERTAINTY_KEY not in n.node.metadata for n in nodes)  # the caller's nodes are left as they were


def test_a_failing_estimator_ranks_that_node_last_and_the_query_answers(
    brief_index, short_llm, question, retrieved, small_uncertainty, caplog
):
    failing_text = retrieved[0].node.get_content()[:80]

    class FailingOnOne(SelfAwareUncertainty):
        def estimate(self, prompt, **kwargs):
            if failing_text in prompt:
                raise BackendError("the probing model ran out of memory")
            return super().estimate(prompt, **kwargs)

    uncertainty = FailingOnOne(
        small_uncertainty.lm, k=small_uncertainty.k, max_new_tokens=small_uncertainty.max_new_tokens
    )
    rerank = SeaKRRerank(reranker=UncertaintyReranker(uncertainty), top_n=None)
    engine = brief_index.as_query_engine(similarity_top_k=TOP_K, node_postprocessors=[rerank], llm=short_llm)
    with caplog.at_level(logging.WARNING, logger="adaptive_gates.seakr.rerank"):
        response = engine.query(question)

    assert response.response.strip()
    last = response.source_nodes[-1]
    assert last.node.node_id == retrieved[0].node.node_id and last.score == -math.inf
    assert last.node.metadata[UNCERTAINTY_KEY] == math.inf
    assert last.node.metadata[ERROR_KEY] == "BackendError: the probing model ran out of memory"
    assert all(
        math.isfinite(u) and ERROR_KEY not in n.node.metadata
        for n, u in zip(response.source_nodes[:-1], _uncertainties(response.source_nodes[:-1]))
    )
    assert any("could not be measured; it ranks last" in r.getMessage() for r in caplog.records)


def test_needs_a_query_and_a_core_reranker(retrieved):
    rerank = SeaKRRerank(top_n=1)
    with pytest.raises(ValueError, match="needs the query"):
        rerank.postprocess_nodes(retrieved)
    with pytest.raises(ValueError, match="needs the query"):
        rerank.postprocess_nodes(retrieved, query_str="  ")
    assert rerank.postprocess_nodes([], query_str="Who wrote Hamlet?") == []
    with pytest.raises(ValidationError, match="UncertaintyReranker"):
        SeaKRRerank(reranker=SelfAwareUncertainty())
    with pytest.raises(ValidationError, match="max_uncertainty"):
        SeaKRRerank(max_uncertainty=math.nan)


def test_keeps_the_retrieval_score_out_of_the_llms_view(retrieved, question, small_uncertainty):
    reranker = UncertaintyReranker(small_uncertainty)
    given = {n.node.node_id: n.score for n in retrieved}
    kept = SeaKRRerank(reranker=reranker, top_n=None, keep_retrieval_score=True).postprocess_nodes(
        retrieved, query_str=question
    )
    assert {n.node.node_id: n.node.metadata[RETRIEVAL_SCORE_KEY] for n in kept} == given
    assert all(0 < score < 1 for score in given.values())  # cosine similarities, now beside U
    assert [n.score for n in kept] == pytest.approx([-u for u in _uncertainties(kept)])
    assert all(RETRIEVAL_SCORE_KEY not in n.node.get_content(metadata_mode=MetadataMode.LLM) for n in kept)
    plain = SeaKRRerank(reranker=reranker, top_n=None).postprocess_nodes(retrieved[:1], query_str=question)
    assert all(RETRIEVAL_SCORE_KEY not in n.node.metadata for n in plain)


def test_the_defaults_sample_little_and_the_papers_settings_are_one_call_away():
    assert SeaKRRerank().reranker.uncertainty.get_params() == SelfAwareUncertainty(**FAST_SAMPLING).get_params()
    assert (
        FAST_SAMPLING["k"] < PAPER_SAMPLING["k"] and FAST_SAMPLING["max_new_tokens"] < PAPER_SAMPLING["max_new_tokens"]
    )
    paper = SeaKRRerank.with_paper_settings(top_n=1)
    assert paper.top_n == 1 and paper.reranker.uncertainty.get_params() == SelfAwareUncertainty().get_params()
    assert {"k": 20, "max_new_tokens": 100}.items() <= paper.reranker.uncertainty.get_params().items()


def test_the_estimators_settings_survive_a_round_trip_into_a_new_process(
    tmp_path, retrieved, question, measured, small_uncertainty
):
    template = "Passage: {snippet}\nQuestion: {question}\nShort answer:{reasoning}"
    rerank = SeaKRRerank(
        reranker=UncertaintyReranker(small_uncertainty, prompt_template=template, stop=["\n", "."]),
        top_n=2,
        max_uncertainty=50.0,
        metadata_mode=MetadataMode.LLM,
        keep_retrieval_score=True,
    )
    back = SeaKRRerank.from_dict(rerank.to_dict())
    assert back.reranker.uncertainty.get_params() == small_uncertainty.get_params()
    assert (back.reranker.prompt_template, back.reranker.stop) == (template, ["\n", "."])
    assert back.to_dict() == rerank.to_dict()

    # the JSON in a new process ranks as the original with SeaKR's default prompt does
    saved = tmp_path / "rerank.json"
    saved.write_text(SeaKRRerank(reranker=UncertaintyReranker(small_uncertainty), top_n=None).to_json())
    nodes = tmp_path / "nodes.json"
    nodes.write_text(json.dumps([n.node.get_content() for n in retrieved]))
    script = (
        "import json, sys, torch\n"
        "torch.set_num_threads(1)\n"
        "from llama_index.core.schema import NodeWithScore, TextNode\n"
        "from llama_index.postprocessor.adaptive_gates import UNCERTAINTY_KEY, SeaKRRerank\n"
        "rerank = SeaKRRerank.from_json(open(sys.argv[1]).read())\n"
        "texts = json.load(open(sys.argv[2]))\n"
        "nodes = [NodeWithScore(node=TextNode(text=t, id_=str(i)), score=0.5) for i, t in enumerate(texts)]\n"
        "ranked = rerank.postprocess_nodes(nodes, query_str=sys.argv[3])\n"
        "print(json.dumps({'k': rerank.reranker.uncertainty.k,\n"
        "                  'ranked': [[int(n.node.node_id), n.node.metadata[UNCERTAINTY_KEY]] for n in ranked]}))\n"
    )
    run = subprocess.run(
        [sys.executable, "-c", script, str(saved), str(nodes), question],
        capture_output=True,
        text=True,
        timeout=600,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "OMP_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr
    out = json.loads(run.stdout.strip().splitlines()[-1])
    assert out["k"] == small_uncertainty.k
    assert [i for i, _ in out["ranked"]] == [r.index for r in measured]
    assert [u for _, u in out["ranked"]] == pytest.approx([r.uncertainty for r in measured])


def test_serialising_refuses_what_json_cannot_name(small_uncertainty):
    own_lm = SelfAwareUncertainty(LocalCausalLM(), k=4)  # a model object of the user's, however loaded
    rerank = SeaKRRerank(reranker=UncertaintyReranker(own_lm))
    with pytest.raises(ValueError, match="a model given as an object, which JSON cannot name"):
        rerank.to_dict()
    with pytest.raises(ValueError, match="cannot name"):
        rerank.to_json()

    class Tuned(SelfAwareUncertainty):
        pass

    with pytest.raises(ValueError, match="cannot serialise a UncertaintyReranker over a Tuned"):
        SeaKRRerank(reranker=UncertaintyReranker(Tuned(k=4))).to_dict()
    # the settings are kept; the model is given again on load
    data = SeaKRRerank(reranker=UncertaintyReranker(small_uncertainty), top_n=1).to_dict()
    again = SeaKRRerank.from_dict(data, reranker=UncertaintyReranker(own_lm))
    assert again.reranker.uncertainty is own_lm and again.top_n == 1


def test_loading_refuses_unknown_or_invalid_settings():
    data = SeaKRRerank().to_dict()
    with pytest.raises(ValidationError, match="unknown keys \\['kk'\\]"):
        SeaKRRerank.from_dict({**data, "reranker": {"uncertainty": {"kk": 3}}})
    with pytest.raises(ValidationError, match="unknown keys \\['lm'\\]"):
        SeaKRRerank.from_dict({**data, "reranker": {**data["reranker"], "lm": "gpt"}})
    with pytest.raises(ValidationError, match="k must be"):
        SeaKRRerank.from_dict({**data, "reranker": {"uncertainty": {"k": 0}}})
    with pytest.raises(ValidationError, match="must be a mapping"):
        SeaKRRerank.from_dict({**data, "reranker": {"uncertainty": [4]}})
