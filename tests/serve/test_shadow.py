"""``serve --shadow-rate`` over real HTTP: a draft-check gate fitted on real outcome
records (AdaRAGUE NQ, Llama-3.1-8B), BM25 over real Wikipedia paragraphs, the
embedded SmolLM2 drafting and answering, a real uvicorn server and httpx. A question
answered by its draft gets its shadow answer over the same passages after the reply,
which it does not change; an answer over the passages is a pair at no cost; the gate
refits, is saved, and a pair is taken back; a shadow whose upstream fails is counted,
never surfaced."""

from __future__ import annotations

import functools
import shutil
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from adaptive_gates import DraftCheckGate, Gate
from adaptive_gates.answering.answerer import ANSWER_STOP, build_prompt, clean_answer
from adaptive_gates.cli import main
from adaptive_gates.gates.base.calibration import CalibrationWarning
from adaptive_gates.models.chat.base import user
from adaptive_gates.models.chat.openai_chat import OpenAIChatModel
from adaptive_gates.retrieval import BM25Retriever
from adaptive_gates.serve import ChatService
from adaptive_gates.serve.app import create_app
from adaptive_gates.serve.shadow import ServedShadowLearner
from support.milvus_server import free_port
from support.serve_process import ServedApp

pytestmark = [pytest.mark.live_server, pytest.mark.usefixtures("one_torch_thread")]

#: Records the gate is fitted on, and questions it is calibrated on (half retrieve).
FIT, ASKED = 120, 6
#: Seconds the background work may take before the test calls it lost (a bound, not a measure).
PATIENCE = 300.0


@pytest.fixture(scope="module")
def retriever(served_corpus) -> BM25Retriever:
    return BM25Retriever.from_jsonl(served_corpus)


@pytest.fixture(scope="module")
def gate_dir(outcome_records, retriever, cached_embedder, served_chat_model, tmp_path_factory) -> Path:
    gate = DraftCheckGate(served_chat_model, retriever, cached_embedder, embedding_dims=8, max_tokens=8)
    gate.fit_outcomes(outcome_records[:FIT])
    return gate.save(tmp_path_factory.mktemp("shadow") / "gate")


@pytest.fixture(scope="module")
def routes(gate_dir, outcome_records, retriever, cached_embedder, served_chat_model, tmp_path_factory):
    """The gate calibrated to answer half of a few questions by their draft, saved, and
    a question of each route."""
    gate = load(gate_dir, retriever, cached_embedder, served_chat_model)
    questions = [r.question for r in outcome_records[FIT : FIT + ASKED]]
    with warnings.catch_warnings():  # a few questions, on purpose: each costs a draft
        warnings.simplefilter("ignore", CalibrationWarning)
        gate.calibrate(questions, target_rate=0.5)
    decisions = gate.decide_batch(questions)
    direct = [d.question for d in decisions if d.route == "draft"]
    retrieved = [d.question for d in decisions if d.route == "retrieve"]
    assert direct and retrieved, [d.route for d in decisions]
    return {"draft": direct[0], "retrieve": retrieved[0], "gate": gate.save(tmp_path_factory.mktemp("shadow") / "c")}


def load(path: Path, retriever, embedder, chat) -> DraftCheckGate:
    gate = Gate.load(path, chat=chat, retriever=retriever, embedder=embedder)
    assert isinstance(gate, DraftCheckGate)
    return gate


@pytest.fixture
def gate(routes, retriever, cached_embedder, served_chat_model, tmp_path) -> DraftCheckGate:
    """The calibrated gate in a directory of its own (learning saves over it)."""
    shutil.copytree(routes["gate"], tmp_path / "gate")
    return load(tmp_path / "gate", retriever, cached_embedder, served_chat_model)


def ask(client: httpx.Client, question: str) -> dict[str, Any]:
    response = client.post("/v1/chat/completions", json={"messages": [{"role": "user", "content": question}]})
    assert response.status_code == 200, response.text
    return response.json()


def eventually(read: Callable[[], dict[str, Any]], done: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
    """``read()`` once ``done`` holds of it (background work under way), within ``PATIENCE`` seconds."""
    deadline = time.monotonic() + PATIENCE
    while True:
        value = read()
        if done(value) or time.monotonic() > deadline:
            return value
        time.sleep(0.2)


def test_a_direct_answer_gets_its_shadow_after_the_reply_and_the_gate_learns(
    gate, routes, retriever, cached_embedder, served_chat_model, tmp_path
) -> None:
    directory = tmp_path / "gate"
    learner = ServedShadowLearner(
        gate,
        served_chat_model,
        rate=1.0,
        refit_every=2,
        after_learning=functools.partial(gate.save, directory, overwrite=True),
    )
    service = ChatService(gate, retriever, served_chat_model, max_tokens=8, shadow=learner)
    with ServedApp(create_app(service)) as app, httpx.Client(base_url=app.url, timeout=PATIENCE) as client:
        shadow_stats = lambda: client.get("/v1/stats").json()["shadow"]  # noqa: E731
        assert shadow_stats()["pairs_recorded"] == 0 and shadow_stats()["active"]

        direct = ask(client, routes["draft"])
        record = direct["adaptive_gates"]
        assert record["route"] == "draft"
        # the user got the draft, as without shadows: the shadow answer is never served
        assert direct["choices"][0]["message"]["content"] == record["decision"]["draft_answer"]
        stats = eventually(shadow_stats, lambda s: s["pairs_recorded"] == 1)
        assert stats["shadows_asked"] == stats["shadow_pairs"] == stats["extra_llm_calls"] == 1
        assert stats["retrieved_pairs"] == stats["refits"] == stats["shadow_failures"] == 0

        retrieved = ask(client, routes["retrieve"])
        assert retrieved["adaptive_gates"]["route"] == "retrieve"
        stats = eventually(shadow_stats, lambda s: s["refits"] == 1)
        assert stats["pairs_recorded"] == 2 and stats["retrieved_pairs"] == 1
        assert stats["extra_llm_calls"] == 1  # the answer over the passages cost nothing more
        assert stats["observations_learnt"] == 2

        # the refit was saved with the gate; the shadow is SmolLM2's answer over the passages it checked
        saved = load(directory, retriever, cached_embedder, served_chat_model)
        shadow, pair = saved.shadow_.entries()
        assert (shadow.source, shadow.probability, pair.source) == ("shadow", 1.0, "retrieved")
        assert saved.shadow_.refits == 1 and saved.combiner_.target == "helps"
        assert shadow.draft == record["decision"]["draft_answer"]
        hits = retriever.search(routes["draft"], gate.k)
        prompt = build_prompt(routes["draft"], [h.as_passage() for h in hits], gate.instruction)
        expected = served_chat_model.chat(user(prompt), max_tokens=8, temperature=0.0, stop=list(ANSWER_STOP))
        assert shadow.answer == clean_answer(expected.text)
        assert pair.answer == clean_answer(retrieved["choices"][0]["message"]["content"])

        listed = client.get("/v1/admin/shadows").json()["data"]
        assert [p["decision_id"] for p in listed] == [retrieved["adaptive_gates"]["id"], record["id"]]
        taken = client.post(f"/v1/admin/shadows/{record['id']}/revert")
        assert taken.status_code == 200 and taken.json()["pair"]["reverted_at"] is not None
        assert client.post(f"/v1/admin/shadows/{record['id']}/revert").status_code == 409
        assert client.post("/v1/admin/shadows/dec-none/revert").status_code == 404
        after = load(directory, retriever, cached_embedder, served_chat_model)
        assert [e.source for e in after.shadow_.entries()] == ["retrieved"]


def test_a_failing_shadow_is_counted_and_the_user_never_sees_it(
    gate, routes, retriever, served_chat_model, caplog
) -> None:
    nowhere = OpenAIChatModel("none", base_url=f"http://127.0.0.1:{free_port()}/v1", api_key="x", max_retries=0)
    learner = ServedShadowLearner(gate, nowhere, rate=1.0, refit_every=1, timeout=30.0)
    service = ChatService(gate, retriever, served_chat_model, max_tokens=8, shadow=learner)
    with ServedApp(create_app(service)) as app, httpx.Client(base_url=app.url, timeout=PATIENCE) as client:
        direct = ask(client, routes["draft"])
        assert direct["adaptive_gates"]["route"] == "draft"
        assert direct["choices"][0]["message"]["content"] == direct["adaptive_gates"]["decision"]["draft_answer"]
        stats = eventually(lambda: client.get("/v1/stats").json()["shadow"], lambda s: s["shadow_failures"] == 1)
        assert stats["shadows_asked"] == 1 and stats["pairs_recorded"] == 0 and stats["refits"] == 0
    assert len(gate.shadow_) == 0
    assert any("shadow answer" in r.getMessage() for r in caplog.records)


def test_the_command_refuses_a_shadow_rate_outside_zero_to_one(capsys) -> None:
    assert main(["serve", "--shadow-rate", "1.5"]) == 2
    assert "--shadow-rate: must be a number in [0, 1], got '1.5'" in capsys.readouterr().err


def test_at_rate_zero_the_answers_over_passages_are_learnt_from_and_no_shadow_is_asked(
    gate, routes, retriever, served_chat_model
) -> None:
    learner = ServedShadowLearner(gate, served_chat_model, rate=0.0, refit_every=50)
    service = ChatService(gate, retriever, served_chat_model, max_tokens=8, shadow=learner)
    with ServedApp(create_app(service)) as app, httpx.Client(base_url=app.url, timeout=PATIENCE) as client:
        assert ask(client, routes["draft"])["adaptive_gates"]["route"] == "draft"
        assert ask(client, routes["retrieve"])["adaptive_gates"]["route"] == "retrieve"
        stats = eventually(lambda: client.get("/v1/stats").json()["shadow"], lambda s: s["pairs_recorded"] == 1)
    assert stats["retrieved_pairs"] == 1 and stats["shadows_asked"] == stats["extra_llm_calls"] == 0
    assert [e.source for e in gate.shadow_.entries()] == ["retrieved"] and stats["refits"] == 0
