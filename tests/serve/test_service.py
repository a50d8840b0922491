"""``ChatService``: one call from a conversation to its answer (``answer``), or the same
answer piece by piece (``answer_stream``), with the real embedded SmolLM2 answering, a
real SKR-kNN gate deciding and BM25 over real Wikipedia paragraphs retrieving."""

from __future__ import annotations

import asyncio

import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.errors import ConversationTooLongError, UnknownDecisionError
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.serve import Answer, ChatService, Limits, build_service

QUESTIONS = ("Who wrote the novel Dracula?", "What is the capital of Australia?", "When did the Berlin Wall fall?")


def _ask(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def gate(served_gate_dir, embedder) -> SKRKnnGate:
    return SKRKnnGate.load(served_gate_dir, embedder=embedder)


@pytest.fixture(scope="module")
def service(gate, served_corpus, served_chat_model) -> ChatService:
    retriever = BM25Retriever.from_jsonl(served_corpus)
    return build_service(gate=gate, chat=served_chat_model, retriever=retriever, k=2, max_tokens=6)


def _streamed(service: ChatService, text: str) -> tuple[str, object]:
    async def read():
        stream = service.answer_stream(_ask(text), {})
        assert stream.record is None and stream.usage is None  # set when it closes
        pieces = [piece async for piece in stream]
        return "".join(pieces), stream

    return asyncio.run(read())


def test_an_answer_carries_its_text_decision_record_and_usage(service, gate) -> None:
    for question in QUESTIONS:
        answer = asyncio.run(service.answer(_ask(question), {}))
        assert isinstance(answer, Answer) and answer.text.strip()
        assert answer.finish_reason in {"stop", "length"}
        retrieved = gate.decide(question).retrieve
        assert answer.record["decision"]["retrieve"] is retrieved
        assert (1 <= len(answer.record["passages"]) <= 2) if retrieved else answer.record["passages"] == []
        assert 0 < answer.usage.completion_tokens <= 6
        assert answer.usage.total_tokens == answer.usage.prompt_tokens + answer.usage.completion_tokens
        assert answer.decision_id == answer.record["id"] and answer.summary["id"] == answer.decision_id


def test_a_streamed_answer_is_the_answer_and_sets_its_record_when_it_closes(service) -> None:
    whole = asyncio.run(service.answer(_ask(QUESTIONS[0]), {}))
    text, stream = _streamed(service, QUESTIONS[0])
    assert text == whole.text  # greedy decoding: the same tokens either way
    assert stream.record is not None
    timeless = [
        {k: v for k, v in record["decision"].items() if k != "latency_ms"} for record in (stream.record, whole.record)
    ]
    assert timeless[0] == timeless[1] and stream.record["route"] == whole.record["route"]
    assert stream.usage == whole.usage and stream.finish_reason == whole.finish_reason
    assert stream.decision_id == stream.record["id"] != whole.decision_id  # each answer its own id


def test_a_stream_closed_early_records_nothing(service) -> None:
    async def leave_after_one_piece():
        stream = service.answer_stream(_ask(QUESTIONS[1]), {"max_tokens": 12})
        first = await anext(stream)
        await stream.aclose()
        return first, stream

    before = service.stats()["stats"]["requests"]
    first, stream = asyncio.run(leave_after_one_piece())
    assert first and stream.decision_id is not None
    assert stream.record is None and stream.usage is None
    assert service.stats()["stats"]["requests"] == before  # not counted, not kept for feedback
    with pytest.raises(UnknownDecisionError):
        asyncio.run(service.feedback(stream.decision_id, correct=True))


def test_what_cannot_be_answered_raises_before_the_upstream_is_asked(gate, served_chat_model) -> None:
    service = build_service(gate=gate, chat=served_chat_model, retriever="bm25", limits=Limits(max_message_tokens=16))
    with pytest.raises(ConversationTooLongError):
        asyncio.run(service.answer(_ask("Tell me everything about " + "the history of Rome " * 20), {}))
    with pytest.raises(ValueError):
        asyncio.run(service.answer([], {}))


def test_a_verdict_teaches_once_keys_agree_or_when_an_admin_or_the_program_gives_it(
    served_gate_dir, embedder, served_corpus, served_chat_model, outcome_records
) -> None:
    gate = SKRKnnGate.load(served_gate_dir, embedder=embedder)  # its own: this test teaches it
    service = ChatService(gate, BM25Retriever.from_jsonl(served_corpus), served_chat_model, max_tokens=1)
    direct = [r.question for r in outcome_records[300:] if not gate.decide(r.question).retrieve][:4]
    rows = len(gate.memory_)

    def judge(question: str, client: str | None, admin: bool = False) -> dict:
        answer = asyncio.run(service.answer(_ask(question), {}, owner=client))
        assert answer.record["route"] == "direct"
        return asyncio.run(service.feedback(answer.decision_id, False, client, admin=admin))

    # one key, however often: pending, the gate unchanged
    replies = [judge(direct[0], "key:one") for _ in range(2)]
    assert [x["status"] for x in replies] == ["pending", "pending"] and len(gate.memory_) == rows
    assert replies[1]["quorum"] == {"keys": 1, "needed": 2} and replies[1]["label"] is None
    # a second key agrees: its verdict and the two pending ones teach the gate
    agreed = judge(direct[0], "key:two")
    assert (agreed["status"], agreed["label"]) == ("taught", "unknown") and len(gate.memory_) == rows + 3
    assert [x.status for x in service.lessons.recent(3)] == ["taught"] * 3
    # an admin's verdict teaches at once, and so does the program's own (no client named)
    assert judge(direct[1], "key:admin", admin=True)["status"] == "taught"
    assert judge(direct[2], None)["status"] == "taught" and len(gate.memory_) == rows + 5
    # a pending verdict taken back never counts towards a quorum
    pending = judge(direct[3], "key:one")
    asyncio.run(service.revert(pending["decision_id"]))
    assert judge(direct[3], "key:two")["status"] == "pending" and len(gate.memory_) == rows + 5
    with pytest.raises(ValueError, match="lesson_quorum"):
        ChatService(gate, service.retriever, served_chat_model, lesson_quorum=0)
