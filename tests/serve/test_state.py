"""The state stores of ``adaptive-gates serve``: the same contract kept in the process
(``LocalState``) and in a real Redis server (``RedisState``); Redis' copy shared by two
stores as by two servers, bounded, expiring, and refused with a 503 while it is down,
where chat answers on (past a rate limit it cannot count) and ``/readyz`` says so."""

from __future__ import annotations

import time

import httpx
import pytest

from adaptive_gates import SKRKnnGate
from adaptive_gates.errors import MissingExtraError, StateStoreUnavailableError, UsageError
from adaptive_gates.gates.base.feedback import Feedback
from adaptive_gates.records.decision import GateDecision
from adaptive_gates.records.selfknowledge import UNKNOWN
from adaptive_gates.retrieval.base import Hit
from adaptive_gates.serve.readiness import REUSE_SECONDS
from adaptive_gates.serve.records import PENDING, TAUGHT, Lesson, ServedDecision
from adaptive_gates.serve.state import LocalState, RedisState
from support.serve_process import ServedApp, ask


def _decision(question: str = "who wrote hamlet?") -> ServedDecision:
    decision = GateDecision(
        retrieve=True, score=0.75, threshold=0.5, gate="skr-knn", latency_ms=1.5, question=question, details={"k": 3}
    )
    return ServedDecision.new(decision, [Hit("p1", "Hamlet is a tragedy.", 0.9, "Hamlet")], owner="key:abc")


def _lesson(decision_id: str, question: str = "who wrote hamlet?", by: str = "key:a", **changes) -> Lesson:
    fields = dict(
        decision_id=decision_id,
        question=question,
        route="retrieve",
        retrieved=True,
        correct=False,
        label=None,
        judged_by=by,
        judged_at=1_700_000_000.0,
        status=PENDING,
    )
    return Lesson(**(fields | changes))


@pytest.fixture(params=["local", "redis"])
def store(request):
    if request.param == "local":
        return LocalState()
    return RedisState.from_url(request.getfixturevalue("redis_server").url)


def test_a_decision_is_kept_whole_and_judged_once(store):
    served = _decision()
    store.book.put(served)
    kept = store.book.get(served.id)
    assert kept is not None
    assert (kept.id, kept.route, kept.owner, kept.verdict) == (served.id, "retrieve", "key:abc", None)
    assert kept.decision.to_dict() == served.decision.to_dict()
    assert kept.passages == served.passages
    assert store.book.judge(served.id, False) is True
    assert store.book.judge(served.id, True) is False  # it has its verdict
    assert store.book.get(served.id).verdict is False
    assert store.book.judge(served.id, None) is True  # taken back: a verdict not taken after all
    assert store.book.get(served.id).verdict is None
    assert store.book.judge(served.id, True) is True
    assert store.book.get("dec-never") is None and store.book.judge("dec-never", True) is False


def test_lessons_are_listed_newest_first_found_and_updated(store):
    for i in range(3):
        store.lessons.add(_lesson(f"dec-{i}", by=f"key:{i}"))
    assert [x.decision_id for x in store.lessons.recent(2)] == ["dec-2", "dec-1"]
    assert [x.decision_id for x in store.lessons.all()] == ["dec-0", "dec-1", "dec-2"]
    assert store.lessons.find("dec-1").judged_by == "key:1" and store.lessons.find("dec-9") is None
    entry = Feedback("who wrote hamlet?", True, False, UNKNOWN)  # the gate's, the handle to withdraw it by
    taught = store.lessons.update("dec-1", status=TAUGHT, label="unknown", entry=entry)
    assert (taught.status, taught.label, taught.entry) == (TAUGHT, "unknown", entry)
    assert store.lessons.find("dec-1").entry == entry
    reverted = store.lessons.mark_reverted("dec-1", 1_700_000_100.0)
    assert reverted.reverted_at == 1_700_000_100.0
    assert store.lessons.find("dec-1").to_dict() == reverted.to_dict()
    assert store.lessons.update("dec-9", status=TAUGHT) is None


def test_a_quota_is_taken_from_until_it_is_empty_per_client(store):
    buckets = store.buckets("feedback", 3, 3600.0)
    assert [buckets.take("key:a") for _ in range(3)] == [0, 0, 0]
    wait = buckets.take("key:a")
    assert 0 < wait <= 1200  # one verdict back every 3600 / 3 s
    assert buckets.take("key:b") == 0  # another client's bucket is its own
    assert store.buckets("requests", 3, 3600.0).take("key:a") == 0  # and another limit's


def test_two_redis_stores_share_one_state(redis_server):
    one, other = RedisState.from_url(redis_server.url), RedisState.from_url(redis_server.url)
    served = _decision()
    one.book.put(served)
    assert other.book.get(served.id).decision.question == "who wrote hamlet?"
    assert one.book.judge(served.id, True) and not other.book.judge(served.id, False)
    one.lessons.add(_lesson(served.id))
    assert [x.decision_id for x in other.lessons.recent(5)] == [served.id]
    other.lessons.mark_reverted(served.id, 1_700_000_200.0)
    assert one.lessons.find(served.id).reverted_at == 1_700_000_200.0
    # a quota of 4 counted once over both
    taken = [store.buckets("feedback", 4, 3600.0).take("key:a") for store in (one, other) * 3]
    assert taken[:4] == [0, 0, 0, 0] and all(wait > 0 for wait in taken[4:])
    # another prefix is another state (two deployments on one Redis)
    apart = RedisState.from_url(redis_server.url, prefix="other:")
    assert apart.book.get(served.id) is None and apart.lessons.all() == []


def test_redis_keeps_the_latest_lessons_and_forgets_old_decisions(redis_server):
    state = RedisState.from_url(redis_server.url, max_age=1.0, lesson_capacity=3)
    for i in range(5):
        state.lessons.add(_lesson(f"dec-{i}"))
    assert [x.decision_id for x in state.lessons.all()] == ["dec-2", "dec-3", "dec-4"]
    assert state.lessons.find("dec-0") is None
    served = _decision()
    state.book.put(served)
    assert state.book.get(served.id) is not None
    deadline = time.monotonic() + 10
    while state.book.get(served.id) is not None and time.monotonic() < deadline:
        time.sleep(0.2)
    assert state.book.get(served.id) is None  # expired with its hash
    assert state.book.judge(served.id, True) is False


def test_a_redis_that_is_down_is_said_so_and_recovers(redis_server):
    state = RedisState.from_url(redis_server.url)
    served = _decision()
    state.book.put(served)
    redis_server.stop()
    for call in (
        state.ping,
        lambda: state.book.get(served.id),
        lambda: state.book.put(served),
        lambda: state.lessons.recent(5),
        lambda: state.buckets("feedback", 3, 60.0).take("key:a"),
    ):
        with pytest.raises(StateStoreUnavailableError, match="the state store is unreachable"):
            call()
    redis_server.start()  # on the same port, empty: it keeps nothing on disk
    state.ping()
    assert state.book.get(served.id) is None


def test_a_state_url_that_is_no_redis_url_is_refused():
    with pytest.raises(UsageError, match="no Redis URL"):
        RedisState.from_url("http://127.0.0.1:6379/0")


def test_without_redis_py_the_state_url_names_the_extra(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "redis", None)  # as if it were not installed
    with pytest.raises(MissingExtraError, match=r"pip install 'adaptive-gates\[redis\]'"):
        RedisState.from_url("redis://127.0.0.1:6379/0")


def test_while_redis_is_down_chat_answers_feedback_gets_503_and_readyz_says_so(
    redis_server, embedder, outcome_records, served_chat_model
):
    from adaptive_gates.retrieval import DenseRetriever
    from adaptive_gates.serve import ChatService
    from adaptive_gates.serve.app import create_app
    from adaptive_gates.serve.limits import Limits
    from support.shared_data import packaged_wiki_paragraphs

    train = outcome_records[:100]
    gate = SKRKnnGate(embedder).fit_outcomes(train)
    corpus = DenseRetriever.from_records(packaged_wiki_paragraphs()[:20], embedder)
    state = RedisState.from_url(redis_server.url)
    limits = Limits(requests_per_minute=1_000)  # counted in Redis while it is up, not in the way while down
    service = ChatService(gate, corpus, served_chat_model, max_tokens=2, state=state, lesson_quorum=1, limits=limits)
    question = train[0].question
    with ServedApp(create_app(service)) as app:
        assert httpx.get(f"{app.url}/readyz").json()["checks"]["state"] == "ok"
        before = ask(app.url, question, max_tokens=1).json()["adaptive_gates"]
        counted = state.client.keys("adaptive-gates:bucket:requests:*")
        assert counted == [b"adaptive-gates:bucket:requests:address:127.0.0.1"]
        redis_server.stop()

        # chat answers on; its decision is not kept, so it cannot be judged later
        during = ask(app.url, question, max_tokens=1)
        assert during.status_code == 200, during.text
        unjudged = during.json()["adaptive_gates"]["id"]
        # a verdict is refused in OpenAI's shape, with when to retry
        for decision_id in (before["id"], unjudged):
            refused = httpx.post(f"{app.url}/v1/feedback", json={"decision_id": decision_id, "correct": False})
            assert refused.status_code == 503 and refused.headers["retry-after"] == "5", refused.text
            error = refused.json()["error"]
            assert error["code"] == "state_store_unavailable" and "the state store is unreachable" in error["message"]
            assert "127.0.0.1" not in refused.text
        listed = httpx.get(f"{app.url}/v1/admin/lessons")
        assert listed.status_code == 503 and listed.json()["error"]["code"] == "state_store_unavailable"
        time.sleep(REUSE_SECONDS)
        ready = httpx.get(f"{app.url}/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["state"].startswith("unreachable")

        redis_server.start()  # back on the same port, empty: the earlier decisions are gone
        again = ask(app.url, question, max_tokens=1).json()["adaptive_gates"]["id"]
        judged = httpx.post(f"{app.url}/v1/feedback", json={"decision_id": again, "correct": False})
        assert judged.status_code == 200, judged.text
        gone = httpx.post(f"{app.url}/v1/feedback", json={"decision_id": unjudged, "correct": False})
        assert gone.status_code == 404
        time.sleep(REUSE_SECONDS)
        assert httpx.get(f"{app.url}/readyz").json()["checks"]["state"] == "ok"
