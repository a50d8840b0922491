"""Self-knowledge collection with the real embedded LM and a real BM25 index."""

import json
import re

import pytest

from adaptive_gates import QARecord, load_outcomes
from adaptive_gates.answering.answerer import LLMAnswerer, build_prompt, clean_answer
from adaptive_gates.answering.collection import collect_outcomes, outcome_usage
from adaptive_gates.models import LocalChatModel
from adaptive_gates.records.data import CorpusRecord
from adaptive_gates.retrieval import BM25Retriever

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CORPUS = [
    CorpusRecord("c1", "Paris", "Paris is the capital and largest city of France."),
    CorpusRecord("c2", "Hamlet", "Hamlet is a tragedy written by William Shakespeare around 1600."),
    CorpusRecord("c3", "Mount Everest", "Mount Everest is Earth's highest mountain above sea level, in the Himalayas."),
    CorpusRecord("c4", "Penicillin", "Penicillin was discovered in 1928 by Alexander Fleming."),
    CorpusRecord("c5", "Jupiter", "Jupiter is the largest planet in the Solar System."),
]
QA = [
    QARecord("q1", "What is the capital of France?", ["Paris"]),
    QARecord("q2", "Who wrote Hamlet?", ["William Shakespeare", "Shakespeare"]),
    QARecord("q3", "Who discovered penicillin?", ["Alexander Fleming", "Fleming"]),
    QARecord("q4", "What is the largest planet in the Solar System?", ["Jupiter"]),
]


class CountingAnswerer:
    """The real answerer, counting the questions it is asked."""

    def __init__(self, inner):
        self.inner, self.asked = inner, 0

    def answer_batch(self, questions, passages=None):
        self.asked += len(questions)
        return self.inner.answer_batch(questions, passages)


def test_prompt_layout_follows_skr():
    prompt = build_prompt("Who wrote Hamlet?", ["Hamlet is a tragedy.", "Other."])
    assert prompt.splitlines() == [
        "Answer the following question with one or few words.",
        "Here are some passages:",
        '[1] "Hamlet is a tragedy."',  # each passage quoted on its line: prompts.quote_passages
        '[2] "Other."',
        'Question: "Who wrote Hamlet?"',  # quoted on its line: prompts.quote_question
    ]
    assert "Here are some passages" not in build_prompt("Who wrote Hamlet?")
    assert clean_answer("\n Answer: Paris\nmore text") == "Paris"
    assert clean_answer("Answer:\n Paris") == "Paris"  # a bare prefix is no answer: read on
    assert clean_answer(" \n ") == ""


def test_collection_resumes_where_it_stopped(tmp_path):
    answerer = CountingAnswerer(LLMAnswerer(max_new_tokens=12, batch_size=4))
    retriever = BM25Retriever.from_records(CORPUS)
    out = tmp_path / "outcomes.jsonl"

    first = collect_outcomes(QA[:2], answerer, retriever, out, k=2, batch_size=2, progress=False)
    assert [r.id for r in first] == ["q1", "q2"] and answerer.asked == 4  # 2 questions x 2 ways
    # An interruption leaves a file of whole lines: simulate a run stopped after q1, q2.
    everything = collect_outcomes(QA, answerer, retriever, out, k=2, batch_size=2, progress=False)
    assert answerer.asked == 8  # only q3 and q4 were answered again
    assert [r.id for r in everything] == ["q1", "q2", "q3", "q4"]
    assert everything[:2] == first
    on_disk = load_outcomes(out)
    assert [r.id for r in on_disk] == ["q1", "q2", "q3", "q4"]
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows[2]["retrieved"][0] == "c4"  # BM25 put the penicillin passage first
    # With the passage in front of it, the real LM names the discoverer.
    assert "fleming" in everything[2].pred_one_retrieval.lower()


def test_collection_resumes_after_a_torn_last_line(tmp_path, caplog):
    answerer = CountingAnswerer(LLMAnswerer(max_new_tokens=8, batch_size=2))
    retriever = BM25Retriever.from_records(CORPUS)
    out = tmp_path / "outcomes.jsonl"
    collect_outcomes(QA[:2], answerer, retriever, out, k=2, batch_size=2, progress=False)
    # A run killed while writing q2's record leaves it cut short, without its newline.
    whole = out.read_bytes()
    q1_end = whole.index(b"\n") + 1
    torn = whole[q1_end : len(whole) - 20]
    out.write_bytes(whole[:q1_end] + torn)

    with caplog.at_level("WARNING", logger="adaptive_gates"):
        resumed = collect_outcomes(QA[:3], answerer, retriever, out, k=2, batch_size=2, progress=False)
    assert answerer.asked == 4 + 4  # q2 again (its record was lost) and q3, both ways
    assert [r.id for r in resumed] == ["q1", "q2", "q3"]
    assert [r.id for r in load_outcomes(out)] == ["q1", "q2", "q3"]
    side = tmp_path / "outcomes.jsonl.torn"
    assert side.read_bytes() == torn + b"\n"
    assert f"{out}: the last line was cut short" in caplog.text and str(side) in caplog.text


def test_collection_refuses_duplicate_ids(tmp_path):
    with pytest.raises(ValueError, match="unique ids to be collected resumably; repeated: 'q1'"):
        collect_outcomes([QA[0], QA[1], QA[0]], LLMAnswerer(), BM25Retriever.from_records(CORPUS), tmp_path / "o.jsonl")


def test_answerer_wraps_a_local_lm(lm):
    answerer = LLMAnswerer(lm, max_new_tokens=8)
    assert isinstance(answerer.chat, LocalChatModel) and answerer.chat.lm is lm
    assert "paris" in answerer.answer("What is the capital of France?").lower()


def test_answerer_takes_a_chat_model_as_it_is_and_refuses_anything_else():
    chat = LocalChatModel()
    assert LLMAnswerer(chat).chat is chat
    with pytest.raises(TypeError, match=r"a ChatModel .* or a LocalCausalLM, got object"):
        LLMAnswerer(object())


def test_collection_keeps_the_local_models_logprobs_and_token_counts(tmp_path, capsys):
    answerer = LLMAnswerer(max_new_tokens=8, batch_size=2)
    out = tmp_path / "outcomes.jsonl"
    records = collect_outcomes(
        QA[:2], answerer, BM25Retriever.from_records(CORPUS), out, k=1, batch_size=2, top_logprobs=2
    )
    direct = answerer.answer_replies([q.question for q in QA[:2]], top_logprobs=2)
    for record, answer in zip(records, direct):
        assert record.pred_no_retrieval == answer.text
        assert record.logprobs_no_retrieval == answer.tokens and all(len(t.top) == 2 for t in answer.tokens)
        assert record.extra["usage"]["no_retrieval"] == answer.usage.to_json()
    assert load_outcomes(out) == records
    spent = outcome_usage(records)
    # The progress bar shows the tokens spent so far.
    bar = capsys.readouterr().err
    assert f"prompt_tokens={spent.prompt_tokens}" in bar and f"completion_tokens={spent.completion_tokens}" in bar


def test_logprobs_need_an_answerer_that_gives_its_replies(tmp_path):
    plain = CountingAnswerer(LLMAnswerer())
    with pytest.raises(TypeError, match="top_logprobs=3 needs an answerer with answer_replies"):
        collect_outcomes(QA, plain, BM25Retriever.from_records(CORPUS), tmp_path / "o.jsonl", top_logprobs=3)
    assert plain.asked == 0
    with pytest.raises(ValueError, match="top_logprobs must be an int >= 0"):
        collect_outcomes(QA, LLMAnswerer(), BM25Retriever.from_records(CORPUS), tmp_path / "o.jsonl", top_logprobs=-1)
    with pytest.raises(ValueError, match="max_workers must be a positive int"):
        LLMAnswerer(max_workers=0)


def test_plain_questions_are_collected_with_a_self_report_and_the_models_name(tmp_path, lm):
    from adaptive_gates.answering.collection import MODEL_FIELD
    from adaptive_gates.answering.self_report import CERTAINTY_FIELD, SELF_REPORT_INSTRUCTION, read_self_report
    from adaptive_gates.gates.base.fitted_on import MODEL_FIELD as FITTED_ON_FIELD
    from adaptive_gates.models.chat.base import user
    from adaptive_gates.models.embedded import SMOLLM2_ID
    from adaptive_gates.records.data import load_qa

    questions = tmp_path / "traffic.txt"
    questions.write_text("What is the capital of France?\n\nWho discovered penicillin?\n", encoding="utf-8")
    records = load_qa(questions, gold=False)
    answerer = LLMAnswerer(lm, max_new_tokens=6, batch_size=2)
    retriever = BM25Retriever.from_records(CORPUS)
    out = tmp_path / "outcomes.jsonl"
    collected = collect_outcomes(records, answerer, retriever, out, k=1, batch_size=2, draft="self-report")
    # The same prompts asked directly: the self-report (no stop at a line's end), then the
    # plain instruction over the passage.
    asked = [user(build_prompt(r.question, None, SELF_REPORT_INSTRUCTION)) for r in records]
    replies = answerer.chat.chat_batch(asked, max_tokens=6, temperature=0.0)
    texts = [r.question for r in records]
    over_passages = answerer.answer_batch(
        texts, [[h.as_passage() for h in hits] for hits in retriever.search_batch(texts, 1)]
    )
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert MODEL_FIELD == FITTED_ON_FIELD == "llm"
    for record, row, reply, with_passages in zip(collected, rows, replies, over_passages):
        report = read_self_report(reply.text)
        assert row["answers"] == [] and record.answers == []
        assert record.pred_no_retrieval == report.answer
        assert CERTAINTY_FIELD in row and row[CERTAINTY_FIELD] == report.certainty
        assert record.pred_one_retrieval == with_passages
        assert row["llm"] == lm.model_id == SMOLLM2_ID
    assert load_outcomes(out) == collected
    # a file of one model's self-report drafts is resumed only so
    with pytest.raises(ValueError, match="holds self-report drafts, not plain ones: resume with --draft self-report"):
        collect_outcomes(records, answerer, retriever, out, k=1, draft="plain")
    with pytest.raises(ValueError, match=re.escape(f"holds outcomes of {SMOLLM2_ID}, not of other-model")):
        collect_outcomes(records, answerer, retriever, out, k=1, draft="self-report", llm="other-model")


def test_a_self_report_needs_the_answerers_chat_model(tmp_path):
    plain = CountingAnswerer(LLMAnswerer())
    with pytest.raises(TypeError, match="draft='self-report' asks the answerer's chat model: pass an LLMAnswerer"):
        collect_outcomes(QA, plain, BM25Retriever.from_records(CORPUS), tmp_path / "o.jsonl", draft="self-report")
    with pytest.raises(ValueError, match="draft must be one of"):
        collect_outcomes(QA, LLMAnswerer(), BM25Retriever.from_records(CORPUS), tmp_path / "o.jsonl", draft="verbose")
    assert plain.asked == 0
