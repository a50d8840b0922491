"""The draft-check gate on real parts: the bundled HotpotQA outcomes of Llama-3.1-8B
(their drafts, the answers without retrieval), BM25 over those questions' own Wikipedia
paragraphs (bundled with the outcomes), the real MiniLM, and the embedded SmolLM2 where
the gate drafts itself. Offline it asks no LLM; a decision keeps the passages it
checked; a saved gate loads to the same scores; bad drafts and failing backends give
recorded decisions."""

from __future__ import annotations

import dataclasses
import json
import math
import threading
import time

import numpy as np
import pytest

from adaptive_gates import DraftCheckGate, Gate
from adaptive_gates.bundled.datasets import adarague_outcomes
from adaptive_gates.cli import main
from adaptive_gates.errors import BackendMisconfiguredError, GateLoadError
from adaptive_gates.evaluation import evaluate_offline
from adaptive_gates.gates.draft_check import retriever_kind
from adaptive_gates.models import LocalChatModel
from adaptive_gates.persistence.saved_format import CONFIG_FILE, with_checksums
from adaptive_gates.records.data import CorpusRecord, write_jsonl
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.signals.draft import DRAFT_FEATURE_NAMES

pytestmark = pytest.mark.usefixtures("one_torch_thread")

#: Records fitted on and held out (the slow part is embedding the questions).
TRAIN, TEST = 240, 120
#: Records SmolLM2 drafts for, fitted on and held out: each draft costs a prefill of its
#: chat prompt (about 0.3 s), and the log-probability columns show on a few.
DRAFTED_FIT, DRAFTED_HELD_OUT = 20, 4


@pytest.fixture(scope="module")
def records():
    return adarague_outcomes("hotpotqa")[: TRAIN + TEST]


@pytest.fixture(scope="module")
def paragraphs(records) -> list[CorpusRecord]:
    """The questions' own context paragraphs (each record carries its ten), once each."""
    unique = dict.fromkeys((c["title"], c["text"]) for r in records for c in r.context)
    return [CorpusRecord(f"h{i}", title, text) for i, (title, text) in enumerate(unique)]


@pytest.fixture(scope="module")
def retriever(paragraphs) -> BM25Retriever:
    return BM25Retriever.from_records(paragraphs)


@pytest.fixture(scope="module")
def fitted(records, retriever, cached_embedder, lm) -> DraftCheckGate:
    # Llama's recorded drafts were asked plainly, and agreement is read as before
    gate = DraftCheckGate(
        LocalChatModel(lm),
        retriever,
        cached_embedder,
        embedding_dims=8,
        max_tokens=8,
        self_report=False,
        agreement="always",
    )
    return gate.fit_outcomes(records[:TRAIN])


def test_offline_it_reads_the_recorded_draft_and_asks_no_llm(fitted, records):
    calls = []

    class Counting:
        def on_llm_call(self, call):
            calls.append(call)

    fitted.add_listener(Counting())
    try:
        scores = fitted.score_records(records[TRAIN:])
    finally:
        fitted.remove_listener(fitted._listeners[-1])
    assert scores.shape == (TEST,) and np.all(np.isfinite(scores))
    assert calls == []
    # the recorded draft is what is read: another draft gives another score
    changed = [type(r)(**{**r.__dict__, "pred_no_retrieval": "unknown"}) for r in records[TRAIN : TRAIN + 5]]
    assert not np.allclose(fitted.score_records(changed), scores[:5])


def test_the_offline_report_counts_one_retrieval_per_question(records, retriever, cached_embedder):
    report = evaluate_offline(
        lambda: DraftCheckGate(retriever=retriever, embedder=cached_embedder, embedding_dims=8),
        records[:TRAIN],
        records[TRAIN:],
    )
    rate = report["at_threshold"]["retrieval_rate"]
    assert report["gate"] == "draft-check" and report["n"] == TEST
    assert report["retrieval_calls"] == 1.0
    assert report["lm_calls"] == pytest.approx(1.0 + rate)
    assert math.isfinite(report["gap_capture"])


def test_a_decision_serves_the_draft_or_answers_over_the_passages_it_checked(fitted, records, retriever):
    questions = [r.question for r in records[TRAIN : TRAIN + 4]]
    decisions = fitted.decide_batch(questions)
    for question, decision in zip(questions, decisions):
        assert decision.error is None and decision.gate == "draft-check"
        assert decision.llm_calls == 1.0
        assert decision.answer_without_retrieval == decision.details["draft"]
        assert decision.passages == tuple(retriever.search(question, 3))
        assert isinstance(decision.details["reasons"], list)
        assert 0.0 <= decision.details["p_with"] <= 1.0 and 0.0 <= decision.details["p_without"] <= 1.0
        assert decision.draft_answer == (None if decision.retrieve else decision.answer_without_retrieval)
    # the decision round-trips through its dict, passages included
    again = type(decisions[0]).from_dict(json.loads(json.dumps(decisions[0].to_dict())))
    assert again.passages == decisions[0].passages


def test_the_threshold_splits_the_training_rows_as_the_logistic_gain_does(fitted, records):
    combiner = fitted.combiner_
    assert combiner.model == "blend" and 0.0 < fitted.threshold_ < 1.0
    shares = fitted.retrieves(fitted.score_records(records[:TRAIN])).mean()
    assert 0.0 < shares < 1.0


def test_a_saved_gate_loads_to_the_same_scores_and_refuses_other_features(
    fitted, records, retriever, tmp_path, monkeypatch
):
    from adaptive_gates.gates.draft_check import gate as draft_check

    fitted.save(tmp_path / "gate")
    loaded = Gate.load(tmp_path / "gate", retriever=retriever, embedder=fitted.embedder, chat=fitted.chat)
    assert isinstance(loaded, DraftCheckGate)
    np.testing.assert_allclose(loaded.score_records(records[TRAIN:]), fitted.score_records(records[TRAIN:]))
    assert loaded.threshold_ == fitted.threshold_
    # a gate whose columns are not the ones its combiner was fitted on (another
    # version's features) is refused, naming the field
    monkeypatch.setattr(draft_check, "COLUMNS", (*draft_check.COLUMNS[:-1], "mismatch_other"))
    with pytest.raises(GateLoadError, match=r"'state\.feature_names'.*mismatch_other"):
        Gate.load(tmp_path / "gate", retriever=retriever, embedder=fitted.embedder)


def test_scoring_through_another_kind_of_retriever_warns(fitted, records, paragraphs, cached_embedder, caplog):
    from adaptive_gates.retrieval import DenseRetriever

    # a few paragraphs make a retriever of another kind as well as many (each is embedded)
    dense = DenseRetriever.from_records(paragraphs[:20], cached_embedder)
    with caplog.at_level("WARNING"):
        _with_retriever(fitted, dense, fitted_with="BM25Retriever").score_records(records[TRAIN : TRAIN + 2])
    assert "fitted with a 'BM25Retriever' and now checks drafts through a 'DenseRetriever'" in caplog.text


def test_the_saved_retriever_kind_is_quoted_in_the_log(fitted, records, retriever, tmp_path, caplog):
    """A crafted save cannot write a line of its own into the log."""
    path = fitted.save(tmp_path / "gate")
    config = json.loads((path / CONFIG_FILE).read_text())
    config["state"]["retriever"] = "BM25Retriever\nCRITICAL forged line"
    (path / CONFIG_FILE).write_text(json.dumps(with_checksums(config)))
    gate = Gate.load(path, retriever=retriever, embedder=fitted.embedder, chat=fitted.chat)
    with caplog.at_level("WARNING"):
        gate.score_records(records[TRAIN : TRAIN + 1])
    assert "fitted with a 'BM25Retriever\\nCRITICAL forged line' and now checks" in caplog.text
    assert not any(line.startswith("CRITICAL forged") for line in caplog.text.splitlines())


def test_without_a_retriever_it_says_what_to_pass(records):
    gate = DraftCheckGate()
    with pytest.raises(BackendMisconfiguredError, match="retriever="):
        gate.fit_outcomes(records[:20])


class FailingRetriever:
    def search(self, query, k=3):
        raise ConnectionError("index unreachable")

    def search_batch(self, queries, k=3):
        raise ConnectionError("index unreachable")


class EmptyRetriever:
    def search(self, query, k=3):
        return []

    def search_batch(self, queries, k=3):
        return [[] for _ in queries]


def _with_retriever(fitted: DraftCheckGate, retriever, fitted_with: str | None = None, chat=None) -> DraftCheckGate:
    """The fitted gate, saved and loaded with another retriever (recorded as fitted with
    ``fitted_with``, else with that retriever's kind) and ``chat`` (default: its own)."""
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        fitted.save(f"{directory}/gate")
        gate = Gate.load(f"{directory}/gate", retriever=retriever, embedder=fitted.embedder, chat=chat or fitted.chat)
    gate._fitted_retriever = fitted_with or type(retriever).__name__
    return gate


def test_a_failing_retriever_gives_a_recorded_fallback_keeping_the_draft(fitted, records):
    decision = _with_retriever(fitted, FailingRetriever()).decide(records[TRAIN].question)
    assert decision.retrieve and decision.is_fallback
    assert "retriever error: ConnectionError: index unreachable" in decision.error
    assert decision.answer_without_retrieval is not None and decision.passages is None


class HungRetriever(EmptyRetriever):
    def search_batch(self, queries, k=3):
        time.sleep(3)
        return super().search_batch(queries, k)


def test_a_retrieval_past_its_timeout_gives_a_recorded_fallback(fitted, records):
    gate = _with_retriever(fitted, HungRetriever())
    gate.set_params(retrieval_timeout=0.3)  # a serving parameter: the fitted gate stays fitted
    assert gate.is_fitted
    decision = gate.decide(records[TRAIN].question)
    assert decision.retrieve and decision.error == "retriever error: TimeoutError: no passages within 0.3 s"
    assert decision.answer_without_retrieval is not None


def test_a_retrieval_timeout_is_at_most_a_day(fitted, records, retriever):
    """A day is waited for as any timeout; 1e308 s, which overflowed the wait into a
    fallback on every decision, is refused where it is set."""
    gate = _with_retriever(fitted, retriever)
    gate.set_params(retrieval_timeout=86400.0)
    decision = gate.decide(records[TRAIN].question)
    assert decision.error is None and decision.passages is not None
    for huge in (86400.5, 1e308):
        with pytest.raises(ValueError, match=r"retrieval_timeout must be a number in \(0, 86400.0\]"):
            gate.set_params(retrieval_timeout=huge)
        with pytest.raises(ValueError, match=r"retrieval_timeout must be a number in \(0, 86400.0\]"):
            DraftCheckGate(retriever=retriever, retrieval_timeout=huge)
    assert gate.retrieval_timeout == 86400.0


@pytest.mark.parametrize("name", ["embedding_dims", "draft_embedding_dims", "max_tokens", "max_workers", "deadline"])
def test_sizes_and_durations_have_an_upper_bound(retriever, name):
    bound = {"max_tokens": "32768", "max_workers": "256", "deadline": "86400.0"}.get(name, "65536")
    with pytest.raises(ValueError, match=rf"{name} must be (an integer|a number) in [\[(][01], {bound}\]"):
        DraftCheckGate(retriever=retriever, **{name: 10**9})


class Wrapping:
    """A user's retriever around a real one (``wrapped``), as memos and filters are."""

    def __init__(self, inner):
        self.wrapped = inner

    def search(self, query, k=3):
        return self.search_batch([query], k)[0]

    def search_batch(self, queries, k=3):
        return self.wrapped.search_batch(queries, k)


class GivingTooMany(Wrapping):
    """Three times the passages asked for, best first."""

    def search_batch(self, queries, k=3):
        return self.wrapped.search_batch(queries, 3 * k)


class LosingText(Wrapping):
    """Of k passages: the best, the second without its text (``None``), and no passage at all."""

    def search_batch(self, queries, k=3):
        found = self.wrapped.search_batch(queries, k)
        return [[hits[0], dataclasses.replace(hits[1], text=None), 42, *hits[3:]] for hits in found]


class WrappingItself(Wrapping):
    """Its ``wrapped`` is itself: unwrapping it never ends unless cycles are caught."""

    def __init__(self, inner):
        self.inner, self.wrapped = inner, self

    def search_batch(self, queries, k=3):
        return self.inner.search_batch(queries, k)


class EndlessWrappers(Wrapping):
    """Each ``wrapped`` is a new wrapper: no cycle, no end."""

    def __init__(self, inner):
        self.inner = inner

    @property
    def wrapped(self):
        return EndlessWrappers(self.inner)

    def search_batch(self, queries, k=3):
        return self.inner.search_batch(queries, k)


def test_more_passages_than_k_are_cut_to_k_and_recorded(fitted, records, retriever, caplog):
    question = records[TRAIN].question
    plain = _with_retriever(fitted, retriever).decide(question)
    with caplog.at_level("WARNING"):
        decisions = _with_retriever(fitted, GivingTooMany(retriever)).decide_batch([question, question])
    for decision in decisions:
        assert decision.error is None and len(decision.passages) == fitted.k
        assert decision.passages == plain.passages and decision.score == plain.score  # the first k, as asked
        cut = f"returned more than k={fitted.k} passages: the first {fitted.k} were kept"
        assert decision.details["retriever_notes"] == [cut]
    assert caplog.text.count("returned more than k=") == 1  # logged once per gate, recorded on every decision


def test_passages_without_text_are_left_out_and_recorded(fitted, records, retriever):
    decision = _with_retriever(fitted, LosingText(retriever)).decide(records[TRAIN].question)
    assert decision.error is None and not decision.is_fallback
    assert decision.passages and all(isinstance(hit.text, str) for hit in decision.passages)
    assert decision.details["passages"] == len(decision.passages) < fitted.k
    assert decision.passages == (retriever.search(records[TRAIN].question, fitted.k)[0],)
    assert decision.details["retriever_notes"] == ["returned 2 passages without text (int, text NoneType): left out"]


@pytest.mark.parametrize("wrapper", [WrappingItself, EndlessWrappers])
def test_a_chain_of_wrappers_without_end_is_unwrapped_in_bounded_time(fitted, records, retriever, wrapper):
    assert retriever_kind(wrapper(retriever)) == wrapper.__name__
    gate = _with_retriever(fitted, wrapper(retriever), fitted_with="BM25Retriever")
    decided = []
    worker = threading.Thread(target=lambda: decided.append(gate.decide(records[TRAIN].question)), daemon=True)
    worker.start()
    worker.join(timeout=120)
    assert not worker.is_alive() and decided[0].error is None and len(decided[0].passages) == fitted.k


def test_a_long_draft_whose_usage_says_it_is_short_is_no_draft(fitted, records, retriever, openai_server):
    from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
    from support.openai_server import Fault

    remote = OpenAIChatModel(openai_server.model_id, base_url=openai_server.base_url)
    gate = _with_retriever(fitted, retriever, chat=remote)
    openai_server.set_fault(Fault.UNDER_REPORTED)  # 50,000 characters, "completion_tokens": 3
    decision = gate.decide(records[TRAIN].question)
    assert decision.is_fallback and decision.retrieve
    assert decision.draft_answer is None and decision.answer_without_retrieval is None
    assert "MalformedReplyError: the reply is " in decision.error, decision.error
    assert "more than 8 tokens hold (at most 256, at 32 a token; the backend counted 3 tokens)" in decision.error


def test_no_passages_is_a_feature_value_not_an_error(fitted, records):
    decision = _with_retriever(fitted, EmptyRetriever()).decide(records[TRAIN].question)
    assert decision.error is None and math.isfinite(decision.score)
    assert decision.passages == () and decision.details["passages"] == 0
    assert "no passages were retrieved" in decision.details["reasons"]


@pytest.mark.parametrize("draft", ["", "I don't know.", "x " * 25_000])
def test_bad_drafts_are_read_not_raised(fitted, records, draft):
    record = records[TRAIN]
    scores = fitted.score_records([type(record)(**{**record.__dict__, "pred_no_retrieval": draft})])
    assert np.isfinite(scores).all()


def test_the_columns_are_the_question_and_draft_features(fitted):
    names = fitted.combiner_.feature_names
    assert names[-len(DRAFT_FEATURE_NAMES) :] == DRAFT_FEATURE_NAMES
    assert fitted.combiner_.n_inputs == len(names) + 8


def test_the_command_line_fits_and_evaluates_it_over_a_corpus(records, paragraphs, tmp_path, capsys):
    train, test, corpus = tmp_path / "train.jsonl", tmp_path / "test.jsonl", tmp_path / "corpus.jsonl"
    write_jsonl(train, [r.to_json() for r in records[:TRAIN]])
    write_jsonl(test, [r.to_json() for r in records[TRAIN:]])
    write_jsonl(corpus, [{"id": p.id, "title": p.title, "text": p.text} for p in paragraphs])
    options = ["--option", "embedding=false"]  # no MiniLM in this process: quick
    report_path = tmp_path / "report.json"
    evaluate = ["eval", "--gate", "draft-check", "--train", str(train), "--test", str(test), "--corpus", str(corpus)]
    assert main([*evaluate, *options, "--json", str(report_path)]) == 0
    report = json.loads(report_path.read_text())
    assert report["gate"] == "draft-check" and report["retrieval_calls"] == 1.0
    fit = ["fit", "--gate", "draft-check", "--train", str(train), "--corpus", str(corpus), "--out", str(tmp_path / "g")]
    assert main([*fit, *options]) == 0
    loaded = Gate.load(tmp_path / "g", retriever=BM25Retriever.from_jsonl(corpus))
    assert loaded.name == "draft-check" and loaded.is_fitted
    # a gate that retrieves nothing to decide refuses --corpus outside --live
    capsys.readouterr()
    refused = ["eval", "--gate", "popularity", "--train", str(train), "--test", str(test), "--corpus", str(corpus)]
    assert main([*refused, "--json", str(tmp_path / "r2.json")]) == 2
    assert "retrieves nothing to decide" in capsys.readouterr().err


class CountingBM25(BM25Retriever):
    """BM25 that counts the searches made through it."""

    searches = 0

    def search_batch(self, queries, k=3):
        self.searches += len(queries)
        return super().search_batch(queries, k)

    def search(self, query, k=3):
        return self.search_batch([query], k)[0]


@pytest.mark.parametrize("route", ["retrieve", "draft"])
def test_the_server_answers_over_the_passages_the_gate_checked_or_serves_the_draft(fitted, records, paragraphs, route):
    import asyncio

    from adaptive_gates.serve import ChatService

    counting = CountingBM25.from_records(paragraphs)
    gate = _with_retriever(fitted, counting)
    # a threshold below (above) every need score: this request retrieves (is answered by its draft)
    gate.calibrate_scores(np.linspace(-2.0, -1.0, 40) if route == "retrieve" else np.linspace(2.0, 3.0, 40), 0.5)
    service = ChatService(gate, counting, gate.chat, max_tokens=8)
    question = records[TRAIN + 1].question
    answer = asyncio.run(service.answer([{"role": "user", "content": question}], {}))
    assert counting.searches == 1  # the gate's check; the server did not search again
    decision = answer.record["decision"]
    assert answer.record["route"] == route
    checked = [(p["id"], p["text"]) for p in decision["passages"]]
    assert len(checked) == 3
    if route == "retrieve":  # answered over the passages the gate checked
        assert [(p["id"], p["text"]) for p in answer.record["passages"]] == checked
        assert checked == [(h.id, h.text) for h in counting.search(question, 3)]
    else:
        assert answer.text == decision["draft_answer"] == decision["details"]["draft"]
        assert answer.record["passages"] == []


@pytest.fixture(scope="module")
def smollm2_drafted(records, lm):
    """Outcome records whose draft is the embedded SmolLM2's own answer without
    retrieval, with its token log-probabilities (the labels stay Llama's: a check of the
    mechanism, not of what the columns are worth)."""
    from dataclasses import replace

    from adaptive_gates.answering.answerer import ANSWER_STOP, build_prompt, clean_answer
    from adaptive_gates.models.chat.base import user

    rows = records[: DRAFTED_FIT + DRAFTED_HELD_OUT]
    replies = LocalChatModel(lm).chat_batch(
        [user(build_prompt(r.question, None)) for r in rows], max_tokens=8, top_logprobs=5, stop=list(ANSWER_STOP)
    )
    return [
        replace(r, pred_no_retrieval=clean_answer(reply.text), logprobs_no_retrieval=tuple(reply.tokens))
        for r, reply in zip(rows, replies)
    ]


def test_the_drafts_log_probabilities_join_the_columns_where_a_backend_gives_them(
    smollm2_drafted, records, retriever, lm, tmp_path
):
    from adaptive_gates.signals.draft import LOGPROB_FEATURE_NAMES

    gate = DraftCheckGate(
        LocalChatModel(lm), retriever, embedding=False, logprob_features=True, max_tokens=8, self_report=False
    ).fit_outcomes(smollm2_drafted[:DRAFTED_FIT])
    held_out = smollm2_drafted[DRAFTED_FIT:]
    assert gate.combiner_.feature_names[-4:] == LOGPROB_FEATURE_NAMES
    assert np.all(np.isfinite(gate.score_records(held_out)))
    decision = gate.decide(held_out[1].question)  # the embedded model gives its log-probs
    assert decision.error is None and math.isfinite(decision.score)
    gate.save(tmp_path / "gate")
    loaded = Gate.load(tmp_path / "gate", retriever=retriever, chat=gate.chat)
    np.testing.assert_allclose(loaded.score_records(held_out), gate.score_records(held_out))
    # records without recorded log-probabilities are refused, naming one
    with pytest.raises(ValueError, match=rf"record {records[0].id!r} has no 'logprobs_no_retrieval'"):
        DraftCheckGate(retriever=retriever, embedding=False, logprob_features=True, self_report=False).fit_outcomes(
            records[:50]
        )


def test_a_backend_without_log_probabilities_is_refused_not_a_fallback(
    smollm2_drafted, retriever, openai_server, openai_base_url
):
    from adaptive_gates.errors import LogprobsUnavailableError
    from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
    from support.openai_server import Fault

    chat = OpenAIChatModel(openai_server.model_id, base_url=openai_base_url)
    gate = DraftCheckGate(chat, retriever, embedding=False, logprob_features=True, max_tokens=8, self_report=False)
    gate.fit_outcomes(smollm2_drafted[:DRAFTED_FIT])
    openai_server.set_fault(Fault.NO_LOGPROBS)
    with pytest.raises(LogprobsUnavailableError, match="returned no token log-probabilities"):
        gate.decide(smollm2_drafted[DRAFTED_FIT + 1].question)


@pytest.mark.parametrize("logprob", [7.0, -math.inf, math.nan])
def test_malformed_log_probabilities_read_as_finite_columns(logprob):
    from adaptive_gates.records.token_logprobs import TokenLogprob
    from adaptive_gates.signals.draft import logprob_features

    rows = logprob_features([(TokenLogprob("Paris", logprob, ()),), ()])
    assert rows.shape == (2, 4) and np.all(np.isfinite(rows))
    assert np.all(rows[1] == 0.0)


# ---------------------------------------------------------------- the self-report and the cold start


def _content_records(records):
    """Records whose recorded draft is an answer: neither empty nor a hedge."""
    from adaptive_gates.records.answer_metrics import normalize_answer
    from adaptive_gates.signals.draft import hedge

    return [r for r in records if normalize_answer(r.pred_no_retrieval) and hedge(r.pred_no_retrieval) is None]


def _stating(record, certainty, draft=None):
    """``record`` with a stated certainty (and another draft, if given)."""
    from dataclasses import replace

    from adaptive_gates.answering.self_report import CERTAINTY_FIELD

    drafted = record.pred_no_retrieval if draft is None else draft
    return replace(record, pred_no_retrieval=drafted, extra={**record.extra, CERTAINTY_FIELD: certainty})


def test_the_cold_start_scores_abstention_and_stated_certainty_offline(records, retriever):
    from adaptive_gates.records.answer_metrics import normalize_answer
    from adaptive_gates.signals.draft import hedge

    gate = DraftCheckGate(retriever=retriever, cold_start=True)
    assert gate.is_fitted and gate.in_cold_start and gate.threshold_ == 0.6
    answers = _content_records(records[TRAIN:])[:4]
    stated = [
        _stating(answers[0], "certain", draft="unknown"),  # an abstention outranks the certainty stated with it
        _stating(answers[1], "uncertain"),
        _stating(answers[2], None),
        _stating(answers[3], "certain"),
    ]
    scores = gate.score_records(stated)
    assert scores.tolist() == [1.0, 0.75, 0.5, 0.0]
    assert gate.retrieves(scores).tolist() == [True, True, False, False]
    # Llama's records hold no certainty: only an empty or hedged draft speaks (Llama
    # abstains rarely: 13 of these 500 drafts, 5 among the first 150)
    llama = adarague_outcomes("2wikimultihopqa")[:150]
    abstained = [not normalize_answer(r.pred_no_retrieval) or hedge(r.pred_no_retrieval) is not None for r in llama]
    assert gate.score_records(llama).tolist() == [1.0 if a else 0.5 for a in abstained] and any(abstained)
    # a certainty of no known value is an error naming the record, not silence
    with pytest.raises(ValueError, match=rf"record {answers[0].id!r}: .* got 'sure'"):
        gate.score_records([_stating(answers[0], "sure")])


def test_a_cold_start_decision_reads_the_self_report_and_keeps_its_passages(records, retriever, lm, tmp_path):
    from adaptive_gates.answering.self_report import read_self_report
    from adaptive_gates.gates.draft_check.cold_start import cold_start_reading
    from adaptive_gates.models.chat.base import user

    chat = LocalChatModel(lm)
    gate = DraftCheckGate(chat, retriever, cold_start=True, max_tokens=6)
    questions = [r.question for r in records[TRAIN : TRAIN + 2]]
    assert 'say "unknown"' in gate.prompt(questions[0]) and 'say "certain"' in gate.prompt(questions[0])
    decisions = gate.decide_batch(questions)
    # the same drafts asked directly: the whole reply read, the marker taken off the answer
    replies = chat.chat_batch([user(gate.prompt(q)) for q in questions], max_tokens=6, temperature=0.0)
    for question, decision, reply in zip(questions, decisions, replies):
        report = read_self_report(reply.text)
        reading = cold_start_reading(report.answer, report.certainty)
        assert decision.error is None and decision.llm_calls == 1.0
        assert decision.answer_without_retrieval == decision.details["draft"] == report.answer
        assert decision.details["certainty"] == report.certainty and decision.details["cold_start"] is True
        assert decision.score == reading.score and decision.details["reasons"] == [reading.reason]
        assert decision.retrieve == (reading.score > 0.6)
        assert decision.passages == tuple(retriever.search(question, 3))  # answered over if it retrieves
    # with no combiner yet there is nothing to learn into from a served decision
    from adaptive_gates.gates.base.feedback import FeedbackNotSupportedError

    with pytest.raises(FeedbackNotSupportedError, match="in its cold start the gate has no fitted combiner"):
        gate.record_decision_feedback(decisions[0], correct=True)
    # saved before any fit, it loads as the cold start it was and decides alike
    gate.save(tmp_path / "cold")
    loaded = Gate.load(tmp_path / "cold", chat=chat, retriever=retriever)
    assert isinstance(loaded, DraftCheckGate) and loaded.in_cold_start and loaded.threshold_ == 0.6
    assert [d.score for d in loaded.decide_batch(questions)] == [d.score for d in decisions]


def test_an_unfitted_gate_without_a_cold_start_still_refuses_to_decide(retriever):
    from adaptive_gates.errors import NotFittedError

    with pytest.raises(NotFittedError, match="fit_outcomes"):
        DraftCheckGate(retriever=retriever).decide("Who wrote Dracula?")


def test_outcomes_hand_the_cold_start_over_to_the_fitted_combiner(records, retriever, cached_embedder):
    gate = DraftCheckGate(
        retriever=retriever,
        embedder=cached_embedder,
        embedding_dims=8,
        cold_start=True,
        self_report=False,
        agreement="always",
    )
    cold = gate.score_records(records[TRAIN:])
    gate.fit_outcomes(records[:TRAIN])
    assert not gate.in_cold_start and gate.threshold_ != 0.6
    fitted = gate.score_records(records[TRAIN:])
    assert len(set(cold.tolist())) <= 2 < len(set(fitted.tolist()))


def test_the_stated_certainty_is_two_columns_of_a_gate_that_reads_the_self_report(records, retriever, caplog):
    from adaptive_gates.records.selfknowledge import outcome_scores

    # Llama's real drafts, each given a stated doubt where it was wrong without passages:
    # a check of the mechanism (the labels are Llama's), not of what the columns are worth
    rows = records[: TRAIN + TEST]
    a, _ = outcome_scores(rows, "contains")
    stated = [_stating(r, "certain" if x else "uncertain") for r, x in zip(rows, a)]
    gate = DraftCheckGate(retriever=retriever, embedding=False, agreement="always").fit_outcomes(stated[:TRAIN])
    assert gate.self_report and gate.combiner_.feature_names[-2:] == ("self_uncertain", "self_certain")
    held_out = stated[TRAIN:]
    doubting = gate.score_records([_stating(r, "uncertain") for r in held_out])
    sure = gate.score_records([_stating(r, "certain") for r in held_out])
    assert doubting.mean() > sure.mean() + 0.2
    # records and gate asked differently are warned of, both ways
    with caplog.at_level("WARNING"):
        DraftCheckGate(retriever=retriever, embedding=False, agreement="never").fit_outcomes(records[:TRAIN])
        DraftCheckGate(retriever=retriever, embedding=False, agreement="never", self_report=False).fit_outcomes(
            stated[:TRAIN]
        )
    assert f"none of {TRAIN} records holds a stated certainty" in caplog.text
    assert "the records hold stated certainties (self-report drafts), but this gate drafts plainly" in caplog.text


def test_agreement_enters_only_where_cross_fitting_shows_it_helps(records, retriever, tmp_path, caplog):
    from adaptive_gates.gates.draft_check.agreement_check import AGREEMENT_COLUMNS

    with caplog.at_level("INFO", logger="adaptive_gates"):
        gate = DraftCheckGate(retriever=retriever, embedding=False, self_report=False).fit_outcomes(records[:TRAIN])
    check = gate.agreement_check_
    assert gate.agreement == "auto" and check.with_agreement is not None and check.without_agreement is not None
    assert check.used == (check.with_agreement > check.without_agreement)
    assert set(AGREEMENT_COLUMNS) <= set(gate.combiner_.feature_names) if check.used else True
    assert not set(AGREEMENT_COLUMNS) & set(gate.combiner_.feature_names) if not check.used else True
    assert f"the agreement columns are {'used' if check.used else 'left out'}" in caplog.text
    assert "out-of-fold gap capture" in caplog.text
    # the choice is saved and read back
    gate.save(tmp_path / "gate")
    loaded = Gate.load(tmp_path / "gate", retriever=retriever)
    assert loaded.agreement_check_ == check
    np.testing.assert_allclose(loaded.score_records(records[TRAIN:]), gate.score_records(records[TRAIN:]))
    # too few records to show anything: agreement stays out; "never" leaves it out
    few = DraftCheckGate(retriever=retriever, embedding=False, self_report=False).fit_outcomes(records[:40])
    assert not few.agreement_check_.used and "too few" in few.agreement_check_.reason
    never = DraftCheckGate(retriever=retriever, embedding=False, self_report=False, agreement="never")
    assert not set(AGREEMENT_COLUMNS) & set(never.fit_outcomes(records[:TRAIN]).combiner_.feature_names)


def test_records_without_gold_answers_are_fitted_on_by_agreement(records, retriever):
    from dataclasses import replace

    ungraded = [replace(r, answers=[], extra={**r.extra, "llm": "my-model"}) for r in records[:TRAIN]]
    gate = DraftCheckGate(retriever=retriever, embedding=False, self_report=False, agreement="never")
    with pytest.raises(ValueError, match=rf"record {ungraded[0].id!r} has no gold answers .* labels='agreement'"):
        gate.fit_outcomes(ungraded)
    # the answer over the passages is the reference, so it is always "right": one head
    with pytest.raises(ValueError, match=r"graded 1 on every record .* fit with target='helps'"):
        gate.fit_outcomes(ungraded, labels="agreement")
    gate.set_params(target="helps").fit_outcomes(ungraded, labels="agreement")
    assert gate.fitted_on_.model == "my-model" and gate.fitted_on_.labels == "agreement"
    assert np.all(np.isfinite(gate.score_records(records[TRAIN : TRAIN + 20])))
