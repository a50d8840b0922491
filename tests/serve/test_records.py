"""What the server remembers of its answers."""

from __future__ import annotations

import json

import pytest

from adaptive_gates.gates import BM25DifficultyGate
from adaptive_gates.gates.base.feedback import Feedback
from adaptive_gates.records.data import Hit
from adaptive_gates.serve.protocol import decision_header
from adaptive_gates.serve.records import DecisionBook, Lesson, LessonLog, ServedDecision, Tally


@pytest.fixture(scope="module")
def decisions(qa_records):
    questions = [r.question for r in qa_records[:60]]
    gate = BM25DifficultyGate().fit(questions)
    retrieved, direct, fallback = gate.decide_batch(["Zxqv blorptang quizzical flumph?", questions[0], "  "])
    assert retrieved.retrieve and not direct.retrieve and fallback.is_fallback
    return retrieved, direct, fallback


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def test_a_served_decision_gets_an_unguessable_id_and_its_summaries(decisions, wiki_paragraphs):
    retrieved, _, fallback = decisions
    p = wiki_paragraphs[0]
    served = ServedDecision.new(retrieved, [Hit(p.id, p.text, 7.5, p.title)], owner="key-1")
    other = ServedDecision.new(retrieved, [])
    assert served.id.startswith("dec-") and len(served.id) == 36 and served.id != other.id
    assert served.route == "retrieve" and served.latency_ms == {"gate": retrieved.latency_ms}
    summary = served.summary()
    assert summary == {
        "id": served.id,
        "route": "retrieve",
        "retrieve": True,
        "score": retrieved.score,
        "threshold": retrieved.threshold,
        "gate": "bm25-difficulty",
    }
    assert decision_header(summary).isascii() and json.loads(decision_header(summary)) == summary
    record = served.to_dict({"requests": 1})
    assert record["passages"] == [{"id": p.id, "title": p.title, "text": p.text, "score": 7.5}]
    assert record["stats"] == {"requests": 1} and record["decision"]["question"] == retrieved.question
    json.dumps(record, allow_nan=False)
    assert ServedDecision.new(fallback, []).summary()["score"] is None  # NaN is no JSON


def test_the_book_forgets_the_oldest_and_the_expired(decisions):
    clock = Clock()
    book = DecisionBook(capacity=2, max_age=10, clock=clock)
    first, second, third = (ServedDecision.new(d, []) for d in decisions)
    book.put(first)
    clock.now = 5
    book.put(second)
    book.put(third)
    assert book.get(first.id) is None  # over capacity
    assert book.get(second.id) is second
    clock.now = 15.5
    assert book.get(second.id) is None and book.get(third.id) is None  # expired
    assert book.get("dec-unknown") is None
    with pytest.raises(ValueError, match=r"capacity must be >= 1 and max_age > 0"):
        DecisionBook(capacity=0)
    with pytest.raises(ValueError):
        DecisionBook(max_age=0)


def test_the_lesson_log_lists_newest_first_and_marks_reverts():
    log = LessonLog(capacity=2)
    lessons = [
        Lesson(
            f"dec-{i}",
            f"q{i}?",
            "direct",
            False,
            i % 2 == 0,
            "known",
            "key-1",
            float(i),
            entry=Feedback(f"q{i}?", False, True),
        )
        for i in range(3)
    ]
    for lesson in lessons:
        log.add(lesson)
    assert [lesson.decision_id for lesson in log.recent(5)] == ["dec-2", "dec-1"]
    assert log.recent(1) == [lessons[2]]
    assert log.find("dec-0") is None and log.find("dec-1") is lessons[1]
    reverted = log.mark_reverted("dec-1", when=99.0)
    assert reverted.reverted_at == 99.0 and log.find("dec-1").reverted_at == 99.0
    assert log.mark_reverted("dec-0", when=1.0) is None
    listed = reverted.to_dict()
    assert "entry" not in listed and listed["decision_id"] == "dec-1" and listed["label"] == "known"
    assert listed["status"] == "taught" and "decision" not in listed
    with pytest.raises(ValueError, match=r"capacity must be >= 1"):
        LessonLog(capacity=0)


def test_the_lesson_log_kept_in_a_file_reads_back_whatever_its_questions_hold(tmp_path):
    """Every change is written; a question holding Unicode's line and paragraph separators
    and NEL (which ``str.splitlines`` splits at) reads back as it was."""
    path = tmp_path / "gate.lessons.jsonl"
    log = LessonLog.load(path)  # no file yet: an empty log that writes there
    assert log.recent(5) == [] and not path.exists()
    odd = "Who wrote\u2028Hamlet\u2029 \x85 and \u00e9t\u00e9?"
    taught = Lesson(
        "dec-1", odd, "direct", False, False, "unknown", "key:abc", 1.5, entry=Feedback(odd, False, False, 1)
    )
    pending = Lesson("dec-2", "Who penned Hamlet?", "direct", False, False, None, "key:def", 2.0, status="pending")
    log.add(taught)
    log.add(pending)
    text = path.read_text(encoding="utf-8")
    assert len(text.splitlines()) == 2  # the line breaks escaped: one line a lesson
    log.mark_reverted("dec-1", when=3.0)
    again = LessonLog.load(path)
    assert [x.to_dict() for x in again.all()] == [x.to_dict() for x in log.all()]
    restored = again.find("dec-1")
    assert restored.question == odd and restored.reverted_at == 3.0
    assert restored.entry == Feedback(odd, False, False, 1)  # the handle a revert after a restart takes back
    assert again.find("dec-2").entry is None and again.find("dec-2").status == "pending"
    path.write_text(text + '{"decision_id": "dec-3"}\n', encoding="utf-8")
    with pytest.raises(ValueError, match=r"line 3: not a lesson"):
        LessonLog.load(path)


def test_the_tally_counts_routes_and_savings(decisions):
    retrieved, direct, fallback = decisions
    tally = Tally()
    assert tally.snapshot()["retrieval_rate"] is None
    tally.count(ServedDecision.new(retrieved, []))
    tally.count(ServedDecision.new(direct, []))
    draft = ServedDecision.new(direct, [])
    draft.route = "draft"
    totals = tally.count(draft)
    after = tally.count(ServedDecision.new(fallback, []))
    assert totals["requests"] == 3 and after == tally.snapshot()
    assert after == {
        "requests": 4,
        "retrieved": 2,
        "drafts": 1,
        "fallbacks": 1,
        "retrieval_rate": 0.5,
        "retrieval_calls_saved": 2,
        "llm_calls_saved": 1,
    }


def test_a_lesson_stands_when_its_file_cannot_be_written(tmp_path, caplog):
    path = tmp_path / "gone" / "gate.lessons.jsonl"  # its folder was removed under the server
    log = LessonLog(path=path)
    lesson = Lesson("dec-1", "Who wrote Hamlet?", "direct", False, False, None, "key:abc", 1.0, status="pending")
    log.add(lesson)
    assert log.find("dec-1") == lesson and "cannot keep the lessons in" in caplog.text
